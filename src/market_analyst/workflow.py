"""What the commands do: start, approve, reject, revise, resume and inspect threads.

Each function opens the checkpointer, takes the thread's lease where it advances the thread, reads
the saved state first, and returns a `ThreadView` for the CLI to render.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from market_analyst.deps import check_analyst
from market_analyst.errors import UserError
from market_analyst.settings import Durability, Settings
from market_analyst.state import (
    DEFAULT_USER,
    Approval,
    validate_thread_id,
    validate_user_id,
)

Progress = Callable[[str], None]


@dataclass
class ThreadView:
    """A thread as the saved state describes it."""

    thread_id: str
    status: str  # awaiting_approval | approved_pending_publish | published | rejected | in_progress
    next: list[str]
    ticker: str | None = None
    user_id: str | None = None
    draft: dict[str, Any] | None = None
    approval: dict[str, Any] | None = None
    publication: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The view as plain data for `--json`."""
        data = asdict(self)
        data.pop("extra")
        data.update(self.extra)
        return data


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _view(graph: Any, thread_id: str) -> ThreadView | None:
    snapshot = graph.get_state(_config(thread_id))
    if snapshot.metadata is None and not snapshot.values:
        return None
    values = snapshot.values or {}
    next_nodes = list(snapshot.next)
    approval: dict[str, Any] | None = values.get("approval")
    draft = values.get("draft")
    if next_nodes == ["publish"]:
        approved = approval is not None and approval.get("decision") == "approved"
        status = "approved_pending_publish" if approved else "awaiting_approval"
    elif not next_nodes and snapshot.tasks:
        # The tasks of the latest checkpoint finished and their writes were saved, but the process
        # died before the next checkpoint: `next` is empty, yet `resume` applies the writes and goes on.
        status = "in_progress"
        next_nodes = [task.name for task in snapshot.tasks]
    elif not next_nodes:
        if values.get("publication"):
            status = "published"
        elif approval and approval.get("decision") == "rejected":
            status = "rejected"
        else:
            status = "ended"
    else:
        status = "in_progress"
    return ThreadView(
        thread_id=thread_id,
        status=status,
        next=next_nodes,
        ticker=values.get("ticker"),
        user_id=values.get("user_id"),
        draft=draft,
        approval=approval,
        publication=values.get("publication"),
        checkpoint_id=(snapshot.config or {}).get("configurable", {}).get("checkpoint_id"),
    )


def _require_view(graph: Any, thread_id: str) -> ThreadView:
    view = _view(graph, thread_id)
    if view is None:
        raise UserError(
            f"unknown thread {thread_id}: no run has that ID (start one with: market-analyst analyze TICKER)"
        )
    return view


def _is_store_outage(exc: BaseException) -> bool:
    """True for the errors a checkpointer raises when its server goes away mid-command."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return True
    redis = sys.modules.get("redis")
    return redis is not None and isinstance(exc, redis.ConnectionError | redis.TimeoutError)


@contextmanager
def _graph(settings: Settings, thread_id: str | None = None) -> Iterator[Any]:
    """The compiled graph over an open checkpointer, holding the thread's lease if one is named.

    A checkpointer that goes away mid-command becomes one clear `UserError`: what finished before
    the last checkpoint is kept, and `resume` continues from there once the server is back."""
    from market_analyst.deps import Deps
    from market_analyst.graph import build_graph
    from market_analyst.persistence.checkpointers import open_checkpointer

    with open_checkpointer(settings) as backend:
        try:
            graph = build_graph(checkpointer=backend.saver, deps=Deps.from_settings(settings))
            if thread_id is None:
                yield graph
            else:
                with backend.lease(thread_id):
                    yield graph
        except Exception as exc:
            if not _is_store_outage(exc):
                raise
            detail = " ".join(str(exc).split())[:160] or type(exc).__name__
            then = (
                f"; when it is back, continue with 'market-analyst resume {thread_id}'" if thread_id else ""
            )
            raise UserError(f"lost the checkpointer at {backend.description} ({detail}){then}") from None


def _run(graph: Any, inputs: Any, thread_id: str, durability: Durability, progress: Progress | None) -> None:
    for update in graph.stream(inputs, _config(thread_id), stream_mode="updates", durability=durability):
        if progress is not None:
            for node in update:
                if not node.startswith("__"):
                    progress(node)


def _user(settings: Settings, user: str | None) -> str:
    # An explicit --user "" is refused, not replaced by the default.
    return validate_user_id(user if user is not None else settings.user or DEFAULT_USER)


def start_analysis(
    settings: Settings,
    ticker: str,
    *,
    question: str | None = None,
    user: str | None = None,
    thread_id: str | None = None,
    progress: Progress | None = None,
) -> ThreadView:
    """Run a new thread up to the approval gate. Bad input fails before any state is written."""
    from market_analyst.market_data import normalize_ticker, open_provider

    symbol = normalize_ticker(ticker)
    user_id = _user(settings, user)
    thread_id = validate_thread_id(thread_id) if thread_id else str(uuid.uuid4())
    open_provider(settings).load(symbol)  # unknown ticker: refuse before a thread exists
    check_analyst(settings)
    with _graph(settings, thread_id) as graph:
        if _view(graph, thread_id) is not None:
            raise UserError(
                f"thread {thread_id} already has a run: see 'market-analyst status {thread_id}' "
                f"or continue it with 'market-analyst resume {thread_id}'"
            )
        inputs = {"ticker": symbol, "question": question or "", "user_id": user_id, "feedback": []}
        _run(graph, inputs, thread_id, settings.durability, progress)
        return _require_view(graph, thread_id)


def _finished_refusal(view: ThreadView, action: str) -> UserError | None:
    if view.status == "published":
        key = (view.publication or {}).get("key")
        return UserError(
            f"thread {view.thread_id} was already published (archive key {key}); nothing to {action}"
        )
    if view.status == "rejected":
        approval = view.approval or {}
        return UserError(
            f"thread {view.thread_id} was rejected by {approval.get('by')} at {approval.get('at')} "
            f"({approval.get('note')}); nothing to {action}"
        )
    if view.status == "ended":
        return UserError(f"thread {view.thread_id} has ended; nothing to {action}")
    if view.status == "in_progress":
        return UserError(
            f"thread {view.thread_id} is not at the approval gate yet: the next node is {view.next[0]}; "
            f"continue it with 'market-analyst resume {view.thread_id}'"
        )
    return None


def _decidable_view(graph: Any, thread_id: str, action: str, *, approved_ok: bool = False) -> ThreadView:
    """The thread's view if a decision on its draft can be made now; otherwise `UserError` saying why."""
    view = _require_view(graph, thread_id)
    refusal = _finished_refusal(view, action)
    if refusal:
        raise refusal
    if view.status == "approved_pending_publish" and not approved_ok:
        raise UserError(
            f"thread {thread_id} is already approved and waits to publish; "
            f"finish it with 'market-analyst resume {thread_id}'"
        )
    assert view.draft is not None
    return view


def _decision(settings: Settings, decision: str, by: str, note: str, view: ThreadView) -> dict[str, Any]:
    """A decision on the view's draft, recorded with who made it and when (UTC)."""
    assert view.draft is not None
    return Approval(
        decision=decision,  # type: ignore[arg-type]
        by=by,
        at=settings.now().isoformat(timespec="seconds"),
        note=note,
        draft_id=view.draft["draft_id"],
    ).model_dump(mode="json")


def approve_thread(
    settings: Settings,
    thread_id: str,
    *,
    user: str | None = None,
    note: str = "",
    progress: Progress | None = None,
) -> ThreadView:
    """Record an approval of the current draft and resume into `publish`."""
    validate_thread_id(thread_id)
    approver = _user(settings, user)
    if settings.approvers and approver not in settings.approvers:
        raise UserError(
            f"user {approver!r} may not approve: MA_APPROVERS allows {', '.join(sorted(settings.approvers))}"
        )
    with _graph(settings, thread_id) as graph:
        view = _decidable_view(graph, thread_id, "approve", approved_ok=True)
        if view.status == "awaiting_approval":
            approval = _decision(settings, "approved", approver, note, view)
            graph.update_state(_config(thread_id), {"approval": approval})
        # else: an approval was recorded before a crash; finish what it started, without asking again.
        _run(graph, None, thread_id, settings.durability, progress)
        return _require_view(graph, thread_id)


def reject_thread(settings: Settings, thread_id: str, *, reason: str, user: str | None = None) -> ThreadView:
    """Record a rejection with its reason and end the run; nothing is published."""
    validate_thread_id(thread_id)
    if not reason.strip():
        raise UserError("reject needs a reason: --reason 'why this draft should not be published'")
    rejecter = _user(settings, user)
    with _graph(settings, thread_id) as graph:
        view = _decidable_view(graph, thread_id, "reject")
        rejection = _decision(settings, "rejected", rejecter, reason.strip(), view)
        graph.update_state(_config(thread_id), {"approval": rejection})
        _run(graph, None, thread_id, settings.durability, None)
        return _require_view(graph, thread_id)


def revise_thread(
    settings: Settings, thread_id: str, *, feedback: str, progress: Progress | None = None
) -> ThreadView:
    """Add reviewer feedback and draft again; the new draft stops at the gate again."""
    validate_thread_id(thread_id)
    if not feedback.strip():
        raise UserError("revise needs feedback: --feedback 'what the next draft should change'")
    check_analyst(settings)
    with _graph(settings, thread_id) as graph:
        _decidable_view(graph, thread_id, "revise")
        snapshot = graph.get_state(_config(thread_id))
        feedback_list = list(snapshot.values.get("feedback") or []) + [feedback.strip()]
        # Written as if `analyze` had produced it, so `draft_report` runs next and drafts anew.
        graph.update_state(_config(thread_id), {"feedback": feedback_list}, as_node="analyze")
        _run(graph, None, thread_id, settings.durability, progress)
        return _require_view(graph, thread_id)


def resume_thread(settings: Settings, thread_id: str, *, progress: Progress | None = None) -> ThreadView:
    """Continue a thread from its last checkpoint, as far as it can go without a new decision."""
    validate_thread_id(thread_id)
    with _graph(settings, thread_id) as graph:
        view = _require_view(graph, thread_id)
        if view.status in ("in_progress", "approved_pending_publish"):
            _run(graph, None, thread_id, settings.durability, progress)
            view = _require_view(graph, thread_id)
            view.message = "resumed"
        else:
            view.message = "nothing to resume"
        return view


def thread_status(settings: Settings, thread_id: str) -> ThreadView:
    """The saved state of a thread, read without taking its lease."""
    validate_thread_id(thread_id)
    with _graph(settings) as graph:
        return _require_view(graph, thread_id)


def list_threads(settings: Settings, *, pending_only: bool = False) -> list[ThreadView]:
    """Every thread (or only those awaiting approval), by thread ID."""
    from market_analyst.deps import Deps
    from market_analyst.graph import build_graph
    from market_analyst.persistence.checkpointers import open_checkpointer

    with open_checkpointer(settings) as backend:
        graph = build_graph(checkpointer=backend.saver, deps=Deps.from_settings(settings))
        views = [v for t in backend.thread_ids() if (v := _view(graph, t)) is not None]
    if pending_only:
        views = [v for v in views if v.status == "awaiting_approval"]
    return views
