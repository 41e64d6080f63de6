"""publish: write the approved draft to the archive, exactly once, and only with an approval; then
remember what the report concluded, as one memory of the user it was for.

The memory is written after the archive write and named by the archive key, so a kill between the
two re-runs `publish`, which finds its document and writes the same memory: a report is remembered
once, and only once it is archived."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from market_analyst.decisions import content_hash
from market_analyst.errors import UserError
from market_analyst.formatting import pct, price, signed_pct
from market_analyst.ports import AuditEvent, Deps, PublishRequest
from market_analyst.state import AnalystState, Approval, Draft, Memory, memory_id, memory_text


class PublishRefused(UserError):
    """`publish` was reached without an approval of the draft in the state."""


def operation_id_for(thread_id: str, draft_id: str) -> str:
    """The application-owned ID of one publication: a repeat of it is the same operation."""
    return f"{thread_id}:{draft_id}"


def publish(state: AnalystState, config: RunnableConfig, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Refuses unless the state records an approval of exactly this draft; a rejection publishes nothing.

    Everything the archive writes comes from the state, so a publish re-run after a crash writes (or
    finds) the very same document."""
    raw = state.get("approval")
    if not raw:
        raise PublishRefused("publish refused: no decision is recorded for this draft")
    approval = Approval.model_validate(raw)
    if approval.decision == "rejected":
        return {"publication": None}
    draft = Draft.model_validate(state["draft"])
    draft_id = draft.draft_id
    if approval.draft_id != draft_id:
        raise PublishRefused(
            f"publish refused: the approval is for draft {approval.draft_id}, "
            f"the state holds draft {draft_id}"
        )
    if approval.content_hash is not None and approval.content_hash != content_hash(draft.markdown):
        raise PublishRefused(
            f"publish refused: draft {draft_id} is not the text that was approved (its content hash differs)"
        )
    thread_id = str(config["configurable"]["thread_id"])
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
    if owner := state.get("user_id"):
        remembered = report_memory(owner, thread_id, draft, approval, result.key, runtime.context.now())
        runtime.context.memory.write([remembered])
    return {"publication": {"key": result.key, "operation_id": operation_id, "created": result.created}}


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
