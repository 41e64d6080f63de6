"""publish: write the approved draft to the archive, exactly once, and only with an approval."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig

from market_analyst.errors import UserError
from market_analyst.persistence.archive import SCHEMA_VERSION, ReportArchive, operation_key
from market_analyst.state import AnalystState, Approval, Draft


class PublishRefused(UserError):
    """`publish` was reached without an approval of the draft in the state."""


def operation_id_for(thread_id: str, draft_id: str) -> str:
    """The application-owned ID of one publication: a repeat of it is the same operation."""
    return f"{thread_id}:{draft_id}"


def build_document(thread_id: str, state: AnalystState, approval: Approval) -> tuple[str, dict[str, Any]]:
    """The archive key and document for this thread's approved draft; built from the state alone,
    so a publish re-run after a crash builds the very same document."""
    draft = Draft.model_validate(state["draft"])
    operation_id = operation_id_for(thread_id, draft.draft_id)
    key = operation_key(draft.ticker, draft.as_of, operation_id)
    report = draft.model_dump(mode="json")
    markdown = report.pop("markdown")
    document = {
        "schema_version": SCHEMA_VERSION,
        "key": key,
        "operation_id": operation_id,
        "thread_id": thread_id,
        "user_id": state.get("user_id"),
        "ticker": draft.ticker,
        "created_at": approval.at,
        "approved_by": approval.by,
        "approved_at": approval.at,
        "approval_note": approval.note,
        "data_source": draft.data_source,
        "as_of": draft.as_of,
        "analyst": draft.analyst,
        "draft_id": draft.draft_id,
        "report": report,
        "markdown": markdown,
    }
    return key, document


def publish(state: AnalystState, config: RunnableConfig, *, archive: ReportArchive) -> dict[str, Any]:
    """Refuses unless the state records an approval of exactly this draft; a rejection publishes nothing."""
    raw = state.get("approval")
    if not raw:
        raise PublishRefused("publish refused: no decision is recorded for this draft")
    approval = Approval.model_validate(raw)
    if approval.decision == "rejected":
        return {"publication": None}
    draft_id = state["draft"]["draft_id"]
    if approval.draft_id != draft_id:
        raise PublishRefused(
            f"publish refused: the approval is for draft {approval.draft_id}, "
            f"the state holds draft {draft_id}"
        )
    thread_id = str(config["configurable"]["thread_id"])
    key, document = build_document(thread_id, state, approval)
    result = archive.publish(key, document)
    return {
        "publication": {
            "key": result.key,
            "operation_id": document["operation_id"],
            "created": result.created,
        }
    }
