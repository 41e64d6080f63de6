"""What the run commands do: start, approve, reject, revise, resume and inspect threads.

Each function opens the checkpointer, takes the thread's lease where it advances the thread, reads
the saved state first, and returns a `ThreadView` for the CLI to render.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, Literal

from market_analyst.deps import build_deps, check_analyst
from market_analyst.errors import RunStopped, StaleDraft, UserError
from market_analyst.formatting import describe_age
from market_analyst.ports import ThreadRow
from market_analyst.settings import Settings
from market_analyst.state import SCHEMA_VERSION, Approval, validate_thread_id
from market_analyst.workflow.session import Progress, Run, open_run
from market_analyst.workflow.stores import chosen_user
from market_analyst.workflow.threads import draft_age_seconds, record, stamp
from market_analyst.workflow.upgrade import raw_values, refuse_newer, upgrade_updates
from market_analyst.workflow.views import ThreadView, config_for, decidable_view, require_view, view_of


def advance(
    run: Run, inputs: Any, thread_id: str, progress: Progress | None, *, ticker: str = "TICKER"
) -> ThreadView:
    """`run.advance`, then the thread's view; a failure once the thread may exist says where it stands
    and what continues it (a store that went away is left to `open_run`, which says so)."""
    try:
        run.advance(inputs, thread_id, progress)
        view = record(run, thread_id)
    except run.backend.outage_errors:
        raise
    except Exception as exc:
        with contextlib.suppress(Exception):  # where the thread stands, as far as the store can say
            record(run, thread_id)
        try:
            view = view_of(run.graph, thread_id)
        except Exception:  # the store is in doubt too: say what is certain
            view = None
        if view is None:
            raise RunStopped(
                thread_id,
                "unknown",
                exc,
                f"nothing was saved; start it again with "
                f"'market-analyst analyze {ticker} --thread-id {thread_id}'",
            ) from exc
        where = f" (next: {', '.join(view.next)})" if view.next else ""
        raise RunStopped(
            thread_id,
            view.status,
            exc,
            f"nothing that finished was lost{where}; continue with 'market-analyst resume {thread_id}'",
        ) from exc
    return view if view is not None else require_view(run.graph, thread_id)


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
    from market_analyst.market_data import normalize_ticker

    symbol = normalize_ticker(ticker)
    user_id = chosen_user(settings, user)
    thread_id = validate_thread_id(thread_id) if thread_id else str(uuid.uuid4())
    check_analyst(settings)
    deps = build_deps(settings, progress)
    deps.market_data.load(symbol)  # unknown ticker: refuse before a thread exists
    with open_run(settings, thread_id, deps) as run:
        if view_of(run.graph, thread_id) is not None:
            raise UserError(
                f"thread {thread_id} already has a run: see 'market-analyst status {thread_id}' "
                f"or continue it with 'market-analyst resume {thread_id}'"
            )
        now = stamp(settings.now())
        inputs = {
            "ticker": symbol,
            "question": question or "",
            "user_id": user_id,
            "feedback": [],
            "started_at": now,
            "schema_version": SCHEMA_VERSION,
        }
        # Listed from the start: a run killed before its first checkpoint leaves a row the next
        # listing finds without a thread, and drops.
        run.backend.index.record(ThreadRow(thread_id, user_id, symbol, "in_progress", now, now))
        return advance(run, inputs, thread_id, progress, ticker=symbol)


def _decision(
    settings: Settings, decision: Literal["approved", "rejected"], by: str, note: str, view: ThreadView
) -> dict[str, Any]:
    """A decision on the view's draft, recorded with who made it and when (UTC)."""
    assert view.draft is not None
    return Approval(
        decision=decision,
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
    allow_stale: bool = False,
    progress: Progress | None = None,
) -> ThreadView:
    """Record an approval of the current draft and resume into `publish`. A draft older than
    `MA_MAX_DRAFT_AGE` is refused unless `allow_stale`: its data may no longer hold."""
    validate_thread_id(thread_id)
    approver = chosen_user(settings, user)
    if settings.approvers and approver not in settings.approvers:
        raise UserError(
            f"user {approver!r} may not approve: MA_APPROVERS allows {', '.join(sorted(settings.approvers))}"
        )
    with open_run(settings, thread_id, progress=progress) as run:
        view = decidable_view(run.graph, thread_id, "approve", approved_ok=True)
        if view.status == "awaiting_approval":
            if not allow_stale:
                _refuse_stale(settings, view)
            approval = _decision(settings, "approved", approver, note, view)
            updates = {**upgrade_updates(run, thread_id), "approval": approval}
            # Recorded as draft_report's, the node before the gate, named rather than inferred: in a
            # thread forked at the gate (by this version or an earlier one) no node has run yet, and
            # LangGraph would infer the input node and run the whole graph again instead of publishing.
            run.graph.update_state(config_for(thread_id), updates, as_node="draft_report")
        # else: an approval was recorded before a crash; finish what it started, without asking again.
        view = advance(run, None, thread_id, progress)
        return _published(view)


def _published(view: ThreadView) -> ThreadView:
    """The view of a thread an approval has just run, refused unless it really was published: a
    command never reports a publication that did not happen."""
    if view.status != "published" or not (view.publication or {}).get("key"):
        where = f" (next: {', '.join(view.next)})" if view.next else ""
        raise RunStopped(
            view.thread_id,
            view.status,
            RuntimeError("the approval ran but no report was published"),
            f"see 'market-analyst history {view.thread_id}'{where}",
        )
    draft = view.draft or {}
    if draft.get("chart") is None:  # the thread's data was fetched by a version before charts
        without = "a price chart" + ("" if draft.get("facts") else " and the analyst's facts")
        view.message = (
            f"this draft was made from data fetched before drafts carried a price chart; it was published "
            f"without {without} (a new run, 'market-analyst analyze {draft.get('ticker') or 'TICKER'}', "
            "has them)"
        )
    return view


def _refuse_stale(settings: Settings, view: ThreadView) -> None:
    if not view.drafted_at:  # made before drafts were dated: its age cannot be shown to be in bounds
        raise StaleDraft(
            f"the draft of thread {view.thread_id} was made by an earlier version that did not record when, "
            f"so its age cannot be checked against MA_MAX_DRAFT_AGE: 'market-analyst revise {view.thread_id} "
            "--feedback ...' analyses it again; or approve it as it is with --allow-stale"
        )
    age = draft_age_seconds(view.drafted_at, settings.now())
    if age is not None and age > settings.max_draft_age.total_seconds():
        raise StaleDraft(
            f"the draft of thread {view.thread_id} was made {describe_age(age)} ago, longer than "
            f"MA_MAX_DRAFT_AGE ({describe_age(settings.max_draft_age.total_seconds())}) allows: "
            f"'market-analyst revise {view.thread_id} --feedback ...' analyses it again; or approve it "
            "as it is with --allow-stale"
        )


def reject_thread(settings: Settings, thread_id: str, *, reason: str, user: str | None = None) -> ThreadView:
    """Record a rejection with its reason and end the run; nothing is published."""
    validate_thread_id(thread_id)
    if not reason.strip():
        raise UserError("reject needs a reason: --reason 'why this draft should not be published'")
    rejecter = chosen_user(settings, user)
    with open_run(settings, thread_id) as run:
        view = decidable_view(run.graph, thread_id, "reject")
        rejection = _decision(settings, "rejected", rejecter, reason.strip(), view)
        updates = {**upgrade_updates(run, thread_id), "approval": rejection}
        # Named as in approve_thread: in a thread forked at the gate, inference would pick the input node.
        run.graph.update_state(config_for(thread_id), updates, as_node="draft_report")
        return advance(run, None, thread_id, None)


def resume_thread(settings: Settings, thread_id: str, *, progress: Progress | None = None) -> ThreadView:
    """Continue a thread from its last checkpoint, as far as it can go without a new decision."""
    validate_thread_id(thread_id)
    with open_run(settings, thread_id, progress=progress) as run:
        view = require_view(run.graph, thread_id)
        refuse_newer(thread_id, raw_values(run, thread_id))
        if view.status in ("in_progress", "approved_pending_publish"):
            view = advance(run, None, thread_id, progress)
            view.message = "resumed"
        else:
            view.message = "nothing to resume"
        return view


def thread_status(settings: Settings, thread_id: str) -> ThreadView:
    """The saved state of a thread, read without taking its lease."""
    validate_thread_id(thread_id)
    with open_run(settings) as run:
        return require_view(run.graph, thread_id)
