"""What the approval inbox reads: the drafts waiting for a decision, one thread with the drafts it
has had, and one archived report (whether the stores answer is `health`). Decisions go through
`runs`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from market_analyst.deps import open_archive
from market_analyst.ports import ThreadQuery
from market_analyst.settings import Settings
from market_analyst.state import validate_thread_id
from market_analyst.workflow.graph_run import open_run
from market_analyst.workflow.threads import checked_threads
from market_analyst.workflow.views import ThreadStatus, ThreadView, config_for, read_history, view_of

# How far back a thread's history is read for its earlier drafts (a revision adds a few checkpoints).
HISTORY_LIMIT = 200
# The most drafts the inbox lists at once, newest first.
INBOX_LIMIT = 200


@dataclass(frozen=True)
class PendingDraft:
    """One thread waiting for a decision, as the inbox lists it."""

    thread_id: str
    ticker: str
    user_id: str | None
    question: str
    recommendation: str
    confidence: float
    revision: int
    drafted_at: str | None  # when the checkpoint holding this draft was written (UTC, ISO 8601)
    approvals: int = 0  # distinct approvals of this draft so far
    approvals_needed: int = 1
    # awaiting_approval, or approved_pending_publish: approved, its publication not finished yet (a
    # store was away, or a process died): `serve` finishes it (workflow/finishing.py), `resume` too.
    status: str = "awaiting_approval"


@dataclass(frozen=True)
class ThreadDetails:
    """A thread, when its latest checkpoint was written, and the drafts it has had, oldest first
    (only the current one where the checkpointer keeps no history, as `MA_REDIS_SHALLOW` does)."""

    view: ThreadView
    updated_at: str | None
    drafts: list[dict[str, Any]] = field(default_factory=list)


# What the inbox lists: drafts waiting for a decision, approved drafts whose publication has not
# finished, which are never out of sight until they are published, and expired drafts, which wait
# for a revise (or a rejection).
PENDING: tuple[ThreadStatus, ...] = ("awaiting_approval", "approved_pending_publish", "expired")


def pending_drafts(settings: Settings, limit: int = INBOX_LIMIT) -> list[PendingDraft]:
    """The threads at the approval gate with no decision yet, and the approved ones still to be
    published, newest first (from the thread index, each checked against its saved state), at most
    `limit`."""
    with open_run(settings) as run:
        shown, _ = checked_threads(run, ThreadQuery(statuses=PENDING, limit=max(1, limit)))
    views = [view for _, view in shown]  # None where the state cannot be read: left out
    return [
        PendingDraft(
            thread_id=view.thread_id,
            ticker=view.draft["ticker"],
            user_id=view.user_id,
            question=view.draft["question"],
            recommendation=view.draft["recommendation"],
            confidence=view.draft["confidence"],
            revision=view.draft["revision"],
            drafted_at=view.drafted_at or view.updated_at,
            approvals=len((view.request or {}).get("approvals") or view.approvals or []),
            approvals_needed=int((view.request or {}).get("approvals_needed") or settings.required_approvals),
            status=view.status,
        )
        for view in views
        if view is not None and view.status in PENDING and view.draft
    ]


def find_thread(settings: Settings, thread_id: str) -> ThreadView | None:
    """The thread's view, or None when no run has that ID (read without taking its lease)."""
    validate_thread_id(thread_id)
    with open_run(settings) as run:
        return view_of(run.graph, thread_id)


def thread_details(settings: Settings, thread_id: str) -> ThreadDetails | None:
    """The thread with its earlier drafts (for the revision diff), or None when it is unknown."""
    validate_thread_id(thread_id)
    with open_run(settings) as run:
        view = view_of(run.graph, thread_id)
        if view is None:
            return None
        history = read_history(run.graph, config_for(thread_id), limit=HISTORY_LIMIT)
    drafts: dict[str, dict[str, Any]] = {}
    for snapshot in reversed(history):  # oldest first
        draft = (snapshot.values or {}).get("draft")
        if draft and draft["draft_id"] not in drafts:
            drafts[draft["draft_id"]] = draft
    if view.draft and view.draft["draft_id"] not in drafts:
        drafts[view.draft["draft_id"]] = view.draft
    return ThreadDetails(view, history[0].created_at if history else None, list(drafts.values()))


def report_by_key(settings: Settings, key: str) -> dict[str, Any] | None:
    """The archived document under `key`, or None; `UserError` for a key that cannot be one."""
    return open_archive(settings).get(key)
