"""human_review: the approval gate. It asks a person for a decision with LangGraph's `interrupt()`,
and accepts only a decision the rule allows on exactly the draft it asks about.

The node re-runs from its start when the run resumes, so it does nothing but ask and check: the
decision is applied (and audited) by `record_decision`, the next node. A decision the rule refuses
fails inside `interrupt()` as an invalid resume value, so LangGraph saves nothing and the same
question stays open.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from market_analyst.decisions import (
    ACTIONS,
    ApprovalSoFar,
    Decision,
    DecisionPolicy,
    DecisionRequest,
    checking,
    content_hash,
)
from market_analyst.ports import Deps
from market_analyst.state import AnalystState


def decision_request(state: AnalystState, thread_id: str, policy: DecisionPolicy) -> DecisionRequest:
    """What the gate asks about the state's draft: the same request in every process that reads it."""
    draft = state["draft"]
    approvals = [
        ApprovalSoFar.model_validate({k: a[k] for k in ("by", "at", "verified", "door")})
        for a in state.get("approvals") or []
        if a.get("draft_id") == draft["draft_id"]
    ]
    return DecisionRequest(
        thread_id=thread_id,
        ticker=draft["ticker"],
        draft_id=draft["draft_id"],
        revision=int(draft["revision"]),
        content_hash=content_hash(draft["markdown"]),
        headline=draft["headline"],
        requested_by=state.get("user_id"),
        allowed_actions=list(ACTIONS),
        approvals=approvals,
        approvals_needed=policy.required_approvals,
        drafted_at=state.get("drafted_at"),
    )


def human_review(state: AnalystState, config: RunnableConfig, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Interrupt with the decision request; on resume, the decision the rule accepted."""
    deps = runtime.context
    request = decision_request(state, str(config["configurable"]["thread_id"]), deps.policy)

    def now() -> str:
        return deps.now().isoformat(timespec="seconds")

    with checking(deps.policy, request, deps.identity, now):
        decision: Decision = interrupt(request.model_dump(mode="json"), response_schema=Decision)
    return {"decision": decision.model_dump(mode="json")}
