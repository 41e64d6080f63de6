"""record_decision: apply the decision the gate accepted, append it to the audit log, and go where
it leads: back to the gate while approvals are short of the quorum, to `publish` once enough
distinct approvers approved this draft, to `analyze` for a revise, to the end for a rejection.

Its audit entry is named by the decision itself, so a re-run after a crash appends nothing twice.
"""

from __future__ import annotations

import hashlib
from typing import Any

from langchain_core.messages import RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command

from market_analyst.decisions import Decision, content_hash
from market_analyst.ports import AuditEvent, Deps
from market_analyst.state import AnalystState, Approval

AUDIT_ACTIONS = {"approve": "approved", "reject": "rejected", "revise": "revised"}


def decision_event_id(thread_id: str, decision: Decision) -> str:
    """The audit event of one decision: the same decision, re-applied after a crash, is one event."""
    key = "|".join((thread_id, decision.draft_id, decision.action, decision.by, decision.at or ""))
    return "decision:" + hashlib.sha256(key.encode()).hexdigest()[:32]


def record_decision(state: AnalystState, config: RunnableConfig, runtime: Runtime[Deps]) -> Command[Any]:
    """Record the accepted decision in the state and in the audit log, and route the run."""
    deps = runtime.context
    thread_id = str(config["configurable"]["thread_id"])
    decision = Decision.model_validate(state["decision"])
    draft = state["draft"]
    digest = content_hash(draft["markdown"])
    deps.audit.append(
        AuditEvent(
            event_id=decision_event_id(thread_id, decision),
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
    if decision.action == "revise":
        return Command(goto="analyze", update=update | _revision(state, decision))
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
        return Command(goto=END, update=update | {"approval": record.model_dump(mode="json")})
    approvals = [
        *(a for a in state.get("approvals") or [] if a.get("draft_id") == decision.draft_id),
        record.model_dump(mode="json", include={"by", "at", "verified", "door", "note", "draft_id"}),
    ]
    update["approvals"] = approvals
    approvers = list(dict.fromkeys(a["by"] for a in approvals))
    if len(approvers) < deps.policy.required_approvals:
        return Command(goto="human_review", update=update)
    final = record.model_copy(update={"approvers": approvers})
    return Command(goto="publish", update=update | {"approval": final.model_dump(mode="json")})


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
