"""record_decision: apply the decision the gate accepted and sealed, append it to the audit log, and
go where it leads: back to the gate while approvals are short of the quorum, to `publish` once enough
distinct approvers approved this draft, to `analyze` for a revise, to the end for a rejection.

Its audit entry is named by the decision itself, so a re-run after a crash appends nothing twice.

It trusts nothing it reads from the state: the decision must carry the gate's seal for this thread
and name the current draft and its exact text, and the rule is applied to it again (an approver
removed or demoted in the meantime decides nothing). A decision that fails any of this was written
into the state by hand: nothing is recorded, and the gate asks again.

It also puts the decision's text (the revise feedback, the rejection reason, the approval note) in
the thread's memory outbox, as a memory of the person the analysis was for: the decision never waits
on the memory store, and the command that made it copies the outbox into the store afterwards
(`workflow/memory_outbox.py`). The entry is saved with this node's checkpoint, so it exists exactly
when the decision is recorded; a kill anywhere in this node leaves `decision` in the checkpoint, and
`resume` runs this node again, which makes the same entry (its ID derives from the thread, the draft,
the kind and who decided) and the same audit event. No decision is recorded without its memory;
none is remembered twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command

from market_analyst.context import Deps
from market_analyst.decisions import Decision, content_hash, refusal
from market_analyst.errors import ServiceUnavailable, UserError
from market_analyst.nodes.human_review import GATE, decision_request, sealed_approvals, unproven
from market_analyst.ports import AuditEvent, Event, event_id_for
from market_analyst.ports.notifications import EventKind
from market_analyst.state import AnalystState, Approval, Memory, MemoryKind, memory_id, memory_text

# What a memory store that cannot answer right now raises: held, damaged, or away.
UNANSWERED = (UserError, ServiceUnavailable, OSError)
AUDIT_ACTIONS = {"approve": "approved", "reject": "rejected", "revise": "revised", "expire": "expired"}
EVENT_KINDS: dict[str, EventKind] = {
    "approve": "counted",
    "reject": "rejected",
    "revise": "revised",
    "expire": "expired",
}
MEMORY_KINDS: dict[str, MemoryKind] = {
    "approve": "approval_note",
    "reject": "rejection",
    "revise": "feedback",
}


def decision_memory(thread_id: str, state: AnalystState, decision: Decision, now: datetime) -> Memory | None:
    """The memory a decision leaves: its note, reason or feedback, owned by the user the analysis was
    for; None for a decision without text (an approval without a note, a revise of options only).
    The same decision gives the same memory, byte for byte."""
    text = memory_text(decision.note)
    owner = state.get("user_id")
    if not text or not owner or decision.action not in MEMORY_KINDS:  # an expiry leaves no memory
        return None
    kind = MEMORY_KINDS[decision.action]
    at = datetime.fromisoformat(decision.at) if decision.at else now
    return Memory(
        id=memory_id(kind, thread_id, decision.draft_id, decision.by),
        owner=owner,
        kind=kind,
        text=text,
        ticker=state.get("ticker"),
        created_at=at if at.tzinfo else at.replace(tzinfo=UTC),
        thread_id=thread_id,
        draft_id=decision.draft_id,
        archive_key=None,
        said_by=decision.by,
        verified=decision.verified,
    )


def outboxed(state: AnalystState, memory: Memory, deps: Deps) -> dict[str, Any]:
    """The state update that puts `memory` in the thread's memory outbox (nothing when it is there
    already: a node re-run after a crash names the same memory); written at once too where the door
    copies no outbox (`Deps.write_memories`)."""
    if deps.write_memories:
        deps.memory.write([memory])
    held = list(state.get("memory_outbox") or [])
    if any(entry.get("id") == memory.id for entry in held):
        return {}
    return {"memory_outbox": [*held, memory.model_dump(mode="json")]}


def decision_event_id(thread_id: str, decision: Decision) -> str:
    """The audit event of one decision: the same decision, re-applied after a crash, is one event (a
    draft expires once, whenever its expiry is recorded)."""
    if decision.action == "expire":
        return f"expired:{thread_id}:{decision.draft_id}"
    key = "|".join((thread_id, decision.draft_id, decision.action, decision.by, decision.at or ""))
    return "decision:" + hashlib.sha256(key.encode()).hexdigest()[:32]


def record_decision(state: AnalystState, config: RunnableConfig, runtime: Runtime[Deps]) -> Command[Any]:
    """Record the sealed decision in the state, the audit log and the owner's memories, and route
    the run; a decision without the gate's seal goes back to the gate, recording nothing."""
    deps = runtime.context
    thread_id = str(config["configurable"]["thread_id"])
    draft = state["draft"]
    digest = content_hash(draft["markdown"])
    raw = state.get("decision")
    if raw is None:  # nothing to record: the gate did not take the answer, and asks again itself
        return Command()
    decision = deps.seal.sealed(thread_id, raw)
    why = unproven(decision, state)
    if why is None and decision is not None:
        found = refusal(deps.policy, decision_request(state, thread_id, deps.policy, deps.seal), decision)
        why = None if found is None else str(found)
    if why is not None or decision is None:
        return Command(goto=GATE, update={"decision": None, "refused": why})
    audited = decision_event_id(thread_id, decision)
    deps.audit.append(
        AuditEvent(
            event_id=audited,
            action=AUDIT_ACTIONS[decision.action],
            at=decision.at or deps.now().isoformat(timespec="seconds"),
            thread_id=thread_id,
            draft_id=decision.draft_id,
            content_hash=digest,
            revision=int(draft["revision"]),
            actor=decision.by,
            verified=decision.verified,
            door=decision.door,
            requester=state.get("user_id"),
            note=decision.note,
        )
    )
    update: dict[str, Any] = {"decision": None}
    if (remembered := decision_memory(thread_id, state, decision, deps.now())) is not None:
        update |= outboxed(state, remembered, deps)
    told = Event(
        event_id=event_id_for(EVENT_KINDS[decision.action], audited),
        kind=EVENT_KINDS[decision.action],
        at=decision.at or deps.now().isoformat(timespec="seconds"),
        thread_id=thread_id,
        ticker=state.get("ticker"),
        draft_id=decision.draft_id,
        content_hash=digest,
        revision=int(draft["revision"]),
        by=decision.by,
        requester=state.get("user_id"),
        verified=decision.verified,
        door=decision.door,
    )
    if decision.action == "expire":
        # The draft can no longer be approved: the thread waits at the gate, expired, for a revise.
        deps.events.put(told)
        expired = {
            "draft_id": decision.draft_id,
            "at": decision.at or deps.now().isoformat(timespec="seconds"),
        }
        return Command(goto=GATE, update=update | {"expired": expired})
    if decision.action == "revise":
        deps.events.put(told)
        return Command(goto="analyze", update=update | _revision(state, decision) | _still_held(state, deps))
    record = Approval(
        decision="approved" if decision.action == "approve" else "rejected",
        by=decision.by,
        at=decision.at or "",
        note=decision.note,
        draft_id=decision.draft_id,
        content_hash=digest,
        verified=decision.verified,
        door=decision.door,
    )
    if decision.action == "reject":
        deps.events.put(told)
        return Command(goto=END, update=update | {"approval": record.model_dump(mode="json")})
    counted = [*sealed_approvals(state, thread_id, deps.seal), decision]
    update["approvals"] = [a.model_dump(mode="json") for a in counted]
    approvers = list(dict.fromkeys(a.by for a in counted))
    if len(approvers) < deps.policy.required_approvals:
        # Short of the quorum: the approval counted is news; one that completes it is told as published.
        deps.events.put(
            dataclasses.replace(told, approvals=f"{len(approvers)} of {deps.policy.required_approvals}")
        )
        return Command(goto=GATE, update=update)
    final = record.model_copy(update={"approvers": approvers})
    return Command(goto="publish", update=update | {"approval": final.model_dump(mode="json")})


def _still_held(state: AnalystState, deps: Deps) -> dict[str, Any]:
    """The recalled memories less those erased since they were recalled: a revise re-drafts without
    them (see `publish.erased_quotes`). Nothing is asked of the store when nothing was recalled."""
    recalled = state.get("recalled") or []
    owner = state.get("user_id")
    if not recalled or not owner:
        return {}
    try:
        kept = deps.memory.at_once().kept(owner, [str(m["id"]) for m in recalled])
        held = [m for m in recalled if str(m["id"]) in kept]
    except UNANSWERED:  # a store that cannot answer now erased nothing since (see `erased_quotes`)
        return {}
    return {"recalled": held} if len(held) != len(recalled) else {}


def _revision(state: AnalystState, decision: Decision) -> dict[str, Any]:
    """A new analysis with the feedback and the options: the last judgement, the model's
    conversation and this draft's approvals are set aside."""
    update: dict[str, Any] = {
        "analysis": None,
        "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
        "agent_steps": 0,
        "approvals": [],
    }
    if decision.note:
        update["feedback"] = [*list(state.get("feedback") or []), decision.note]
    options = dict(decision.options)
    if question := options.pop("question", None):
        update["question"] = question
    if options:
        update["overrides"] = {**dict(state.get("overrides") or {}), **options}
    return update
