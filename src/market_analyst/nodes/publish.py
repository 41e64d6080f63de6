"""publish: write the approved draft to the archive, exactly once, and only with an approval."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from market_analyst.decisions import content_hash
from market_analyst.errors import UserError
from market_analyst.ports import AuditEvent, Deps, PublishRequest
from market_analyst.state import AnalystState, Approval, Draft


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
    return {"publication": {"key": result.key, "operation_id": operation_id, "created": result.created}}
