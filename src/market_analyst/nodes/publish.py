"""publish: write the approved draft to the archive, exactly once, and only with a proof of its
approval; then remember what the report concluded, as one memory of the user it was for.

The proof is not the state's `approval`, which anyone who can write the state could set: it is the
state's sealed approvals (`decisions.DecisionSeal`) of this thread's current draft, its ID and its
exact text, by distinct approvers the rule still allows (the allow-list, their role, separation of
duties), as many as the quorum needs. Without it nothing is written.

The memory goes into the thread's memory outbox with the publication, named by the archive key, so
a kill after the archive write re-runs `publish`, which finds its document and makes the same entry:
a report is remembered once, and only once it is archived (`workflow/memory_outbox.py` copies it
into the memory store)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Command

from market_analyst.context import Deps
from market_analyst.decisions import DecisionRequest, approvals_text, content_hash, refusal
from market_analyst.formatting import pct, price, signed_pct
from market_analyst.nodes.human_review import GATE, decision_request, sealed_approvals
from market_analyst.nodes.record_decision import UNANSWERED, outboxed
from market_analyst.ports import AuditEvent, Event, MemoryStore, PublishRequest, event_id_for
from market_analyst.state import AnalystState, Approval, Draft, Memory, memory_id, memory_text


def operation_id_for(thread_id: str, draft_id: str) -> str:
    """The application-owned ID of one publication: a repeat of it is the same operation."""
    return f"{thread_id}:{draft_id}"


def proven_approval(state: AnalystState, thread_id: str, deps: Deps) -> Approval | str:
    """The approval the state's sealed approvals prove for its current draft (the last one that
    counted, naming everyone who counted), or why they prove none."""
    draft = Draft.model_validate(state["draft"])
    request: DecisionRequest = decision_request(state, thread_id, deps.policy).model_copy(
        update={"approvals": []}
    )
    sealed = sealed_approvals(state, thread_id, deps.seal)
    counted = [a for a in sealed if refusal(deps.policy, request, a) is None]
    needed = deps.policy.required_approvals
    if not counted or len(counted) < needed:
        return (
            f"publish refused: draft {draft.draft_id} has {approvals_text(len(counted), needed)} made at the "
            "gate on its current text; it waits for a decision"
        )
    last = counted[-1]
    return Approval(
        decision="approved",
        by=last.by,
        at=last.at or "",
        note=last.note,
        draft_id=draft.draft_id,
        content_hash=content_hash(draft.markdown),
        verified=last.verified,
        door=last.door,
        approvers=[a.by for a in counted],
    )


def erased_quotes(draft: dict[str, Any], owner: str | None, memory: MemoryStore) -> list[dict[str, Any]]:
    """The memories the draft quotes that the store no longer holds (erased by `memories forget`,
    `prune --memories-older-than` or `forget`): a draft that quotes one cannot be published. A draft
    that quotes none asks the store nothing."""
    quoted = [m for m in draft.get("memories") or [] if m.get("id")]
    if not quoted or not owner:
        return []
    try:
        kept = memory.at_once().kept(owner, [str(m["id"]) for m in quoted])
        return [m for m in quoted if str(m["id"]) not in kept]
    except UNANSWERED:
        # The store cannot answer now (held by an erasure, damaged, away): a decision does not wait
        # for it. Every erasure takes a memory's words out of the threads that quoted it before it
        # touches the store (`retention.unquote`), so words this draft still holds were not erased.
        return []


def erased_refusal(thread_id: str, erased: list[dict[str, Any]], *, cli: bool = True) -> str:
    """Why a draft quoting erased memories is not published, and the way on, in one line (naming the
    command line's `revise` only where the decision came through the command line's workflow)."""
    named = ", ".join(f"{m['id']} ({m.get('kind')}, {m.get('date')})" for m in erased)
    way = f"'market-analyst revise {thread_id} --feedback ...'" if cli else "a revise"
    return (
        f"the draft of thread {thread_id} quotes {len(erased)} memory(ies) since erased ({named}), so it is "
        f"not published: {way} re-drafts without them"
    )


def publish(state: AnalystState, config: RunnableConfig, runtime: Runtime[Deps]) -> Any:
    """Archives the draft the sealed approvals prove; a rejection publishes nothing, and so does a run
    that reached here without a proof (back to the gate where the state claims an approval).

    Everything the archive writes comes from the state, so a publish re-run after a crash writes (or
    finds) the very same document."""
    raw = state.get("approval")
    if raw and raw.get("decision") == "rejected":
        return {"publication": None}
    draft = Draft.model_validate(state["draft"])
    draft_id = draft.draft_id
    thread_id = str(config["configurable"]["thread_id"])
    approval = proven_approval(state, thread_id, runtime.context)
    if isinstance(approval, str):
        if raw and raw.get("decision") == "approved":
            # The state says approved, but nothing proves it (an approval of an earlier version, or
            # sealed with a records secret since changed, or written by hand): ask again, writing only
            # what the gate itself never writes.
            return Command(goto=GATE, update={"approval": None})
        # Sent here with no approval at all (a `Command(goto="publish")`): nothing is written and
        # this branch ends; where the gate waits beside it, it goes on waiting.
        return {}
    if erased := erased_quotes(state["draft"], state.get("user_id"), runtime.context.memory):
        # Erased after the draft recalled it: its words must not reach the archive. Every door that
        # decides through the workflow refuses before this in one line; any other (LangGraph's
        # server) is sent back to the gate, whose request then says why, and nothing is written.
        return Command(
            goto=GATE, update={"approval": None, "refused": erased_refusal(thread_id, erased, cli=False)}
        )
    operation_id = operation_id_for(thread_id, draft_id)
    request = PublishRequest(
        operation_id=operation_id,
        thread_id=thread_id,
        user_id=state.get("user_id"),
        draft=draft.model_dump(mode="json"),
        approval=approval.model_dump(mode="json"),
    )
    result = runtime.context.archive.publish_report(request)
    runtime.context.audit.append(
        AuditEvent(
            event_id=f"published:{operation_id}",
            action="published",
            at=approval.at,
            thread_id=thread_id,
            draft_id=draft_id,
            content_hash=content_hash(draft.markdown),
            revision=draft.revision,
            actor=", ".join(approval.approvers or [approval.by]),
            verified=approval.verified,
            door=approval.door,
            requester=state.get("user_id"),
            archive_key=result.key,
        )
    )
    runtime.context.events.put(
        Event(
            event_id=event_id_for("published", operation_id),
            kind="published",
            at=approval.at,
            thread_id=thread_id,
            ticker=draft.ticker,
            draft_id=draft_id,
            content_hash=content_hash(draft.markdown),
            revision=draft.revision,
            by=", ".join(approval.approvers or [approval.by]),
            requester=state.get("user_id"),
            verified=approval.verified,
            door=approval.door,
        )
    )
    update: dict[str, Any] = {
        "publication": {"key": result.key, "operation_id": operation_id, "created": result.created}
    }
    if owner := state.get("user_id"):
        remembered = report_memory(owner, thread_id, draft, approval, result.key, runtime.context.now())
        update |= outboxed(state, remembered, runtime.context)
    return update


def report_text(draft: Draft) -> str:
    """A published report in a few lines: ticker, as-of date, recommendation, confidence, the headline
    figures and the risk factors."""
    f = draft.figures
    text = (
        f"Published report on {draft.ticker} as of {draft.as_of}: {draft.recommendation.upper()}, "
        f"confidence {draft.confidence:.2f}. Price {price(f.get('price'))}, "
        f"1Y {signed_pct(f.get('return_1y'))}, "
        f"volatility {pct(f.get('volatility_1y'))}, max drawdown {pct(f.get('max_drawdown_1y'))}, "
        f"trend {f.get('trend')}. Risks: {'; '.join(draft.risk_factors) or 'none flagged'}."
    )
    return memory_text(text)


def report_memory(
    owner: str, thread_id: str, draft: Draft, approval: Approval, key: str, now: datetime
) -> Memory:
    """The memory of one published report, named by its archive key (a re-run names the same one)."""
    at = datetime.fromisoformat(approval.at) if approval.at else now
    return Memory(
        id=memory_id("report", key),
        owner=owner,
        kind="report",
        text=report_text(draft),
        ticker=draft.ticker,
        created_at=at if at.tzinfo else at.replace(tzinfo=UTC),
        thread_id=thread_id,
        draft_id=draft.draft_id,
        archive_key=key,
        said_by=", ".join(approval.approvers or [approval.by]),
        verified=approval.verified,
    )
