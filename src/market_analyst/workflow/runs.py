"""What the run commands do: start, approve, reject, revise, resume and inspect threads.

Each function opens the checkpointer, takes the thread's lease where it advances the thread, reads
the saved state first, and returns a `ThreadView` for the CLI to render.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any, Literal

from langgraph.types import Command

from market_analyst.choices import Durability
from market_analyst.context import Deps
from market_analyst.decisions import Action, DecisionRefused, DecisionRequest, Identity, validated
from market_analyst.deps import build_deps, check_analyst
from market_analyst.errors import RunStopped, ServiceUnavailable, StaleDraft, UserError
from market_analyst.formatting import describe_age
from market_analyst.graph import LEGACY_GATE
from market_analyst.nodes.publish import erased_quotes, erased_refusal
from market_analyst.ports import ThreadRow
from market_analyst.settings import Settings
from market_analyst.state import MAX_QUESTION_CHARS, SCHEMA_VERSION, validate_thread_id
from market_analyst.workflow.graph_run import Progress, Run, open_run, outage_in
from market_analyst.workflow.memory_outbox import WAITING, catch_up, deliver, hold
from market_analyst.workflow.stores import chosen_user
from market_analyst.workflow.threads import draft_age_seconds, record, stamp
from market_analyst.workflow.upgrade import raw_values, refuse_newer, upgrade_updates
from market_analyst.workflow.views import ThreadView, config_for, decidable_view, require_view, view_of


def advance(
    run: Run,
    inputs: Any,
    thread_id: str,
    progress: Progress | None,
    *,
    ticker: str = "TICKER",
    durability: Durability | None = None,
) -> ThreadView:
    """`run.advance`, then the thread's view; a failure once the thread may exist says where it stands
    and what continues it (a store that went away is left to `open_run`, which says so)."""
    # The dependencies are built before the thread moves: a setting they refuse is the command's
    # error, not a run that stopped.
    _ = run.deps
    try:
        run.advance(inputs, thread_id, progress, durability=durability)
        view = record(run, thread_id)
    except Exception as exc:
        if outage_in(exc, run.backend.outage_errors):
            raise  # open_run says the store went away, and what was kept
        with contextlib.suppress(Exception):  # where the thread stands, as far as the store can say
            record(run, thread_id)
        retried = "it will be retried: a running 'market-analyst serve' publishes it on its own; "
        try:
            view = view_of(run.graph, thread_id)
        except Exception as unread:  # the thread cannot be read now: say what is certain
            if run.approved and not run.published:  # this run recorded an approval: it stands
                raise RunStopped(
                    thread_id,
                    "approved_pending_publish",
                    exc,
                    f"{retried}continue with 'market-analyst resume {thread_id}'",
                ) from exc
            if isinstance(unread, ServiceUnavailable) or outage_in(unread, run.backend.outage_errors):
                raise RunStopped(
                    thread_id,
                    "not readable while it is away",
                    exc,
                    f"what finished was kept; continue with 'market-analyst resume {thread_id}' once "
                    "it is back",
                ) from exc
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
        then = retried if view.status == "approved_pending_publish" else ""
        raise RunStopped(
            thread_id,
            view.status,
            exc,
            f"nothing that finished was lost{where}; {then}continue with 'market-analyst resume {thread_id}'",
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
    profile_answers: dict[str, str] | None = None,
) -> ThreadView:
    """Run a new thread up to the approval gate. Bad input fails before any state is written.
    `profile_answers` (risk_tolerance, horizon) are used for this thread instead of the stored profile
    or the defaults: the first-run questions a person answered without saving them."""
    from market_analyst.market_data import normalize_ticker

    symbol = normalize_ticker(ticker)
    user_id = chosen_user(settings, user)
    thread_id = validate_thread_id(thread_id) if thread_id else str(uuid.uuid4())
    if question and len(question) > MAX_QUESTION_CHARS:
        raise UserError(f"--question is {len(question)} characters; at most {MAX_QUESTION_CHARS}")
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
            **({"overrides": dict(profile_answers)} if profile_answers else {}),
            "started_at": now,
            "schema_version": SCHEMA_VERSION,
        }
        # Listed from the start: a run killed before its first checkpoint leaves a row the next
        # listing finds without a thread, and drops.
        run.backend.index.record(ThreadRow(thread_id, user_id, symbol, "in_progress", now, now))
        # What earlier decisions left waiting for the memory store goes in first, so that this run
        # recalls it; a store that cannot take it now leaves it waiting, and the run goes on.
        catch_up(run, deps.memory.at_once())
        return advance(run, inputs, thread_id, progress, ticker=symbol)


Announce = Callable[[str], None]


def decide(
    settings: Settings,
    thread_id: str,
    *,
    action: Action,
    identity: Identity,
    note: str = "",
    draft_id: str | None = None,
    content_hash: str | None = None,
    options: dict[str, str] | None = None,
    allow_stale: bool = False,
    progress: Progress | None = None,
    announce: Announce | None = None,
    deps: Deps | None = None,
    memories: Remembering = "now",
) -> tuple[ThreadView, ThreadView]:
    """Make one decision on the thread's current draft through the gate, under the thread's lease,
    and return the thread before and after it.

    The decision names the draft it was made on (`draft_id`, and `content_hash` where the door knows
    what the decider read; without them it is made on the current draft, which `announce` hears of
    first). The rule (`decisions.refusal`) is checked before the gate is resumed, so a refused
    decision records nothing; the gate checks it again as it resumes. An approval that was recorded
    before a crash is finished without being asked for again.

    What the decision leaves to remember is copied into the memory store as it ends, if the store
    can take it at once (`memories="now"`), else left waiting (`workflow/memory_outbox.py`); a door
    that copies it itself afterwards passes `memories="later"`."""
    validate_thread_id(thread_id)
    with open_run(settings, thread_id, deps, progress, identity=identity) as run:
        before = decidable_view(run.graph, thread_id, action, approved_ok=action == "approve")
        if before.status == "approved_pending_publish":
            run.approved = True  # recorded by an earlier command: this one only publishes
            return before, _remembering(
                run, thread_id, memories, lambda: advance(run, None, thread_id, progress, durability="sync")
            )
        # A thread of an earlier schema is brought to this one (workflow/upgrade.py) as it enters the
        # gate; one paused by the static gate of an earlier version enters it now.
        updates = upgrade_updates(run, thread_id)
        if before.next == [LEGACY_GATE] or updates:
            before = _into_the_gate(run, thread_id, progress, updates)
        if draft_id == "":
            raise DecisionRefused(
                422, "the decision does not name the draft it was made on; reload the draft and decide again"
            )
        request = DecisionRequest.model_validate(before.request)
        if announce is not None and draft_id is None:
            announce(
                f"Deciding ({action}) on revision {request.revision} of thread {thread_id}, "
                f"draft {request.draft_id}"
            )
        decision = validated(
            {
                "action": action,
                "draft_id": draft_id or request.draft_id,
                "content_hash": content_hash or (None if draft_id else request.content_hash),
                "by": identity.name,
                "note": note,
                "options": options or {},
            },
            run.deps.policy,
            request,
            identity,
            lambda: settings.now().isoformat(timespec="seconds"),
        )
        if action == "approve" and not allow_stale:
            _refuse_stale(settings, before)
        if action == "approve" and (
            erased := erased_quotes(before.draft or {}, before.user_id, run.deps.memory)
        ):
            raise UserError(erased_refusal(thread_id, erased))
        # Sealed by this door: the gate takes who decided and when from the seal, so a `resume` after
        # a crash applies the same decision in the same name.
        sealed = run.deps.seal.for_doors().seal(thread_id, decision)
        # A decision is saved at once whatever MA_DURABILITY says: once a command has said a decision
        # was made, no crash may ask for it again (a revise's new analysis runs in this mode too).
        after = _remembering(
            run,
            thread_id,
            memories,
            lambda: advance(
                run, Command(resume=sealed.model_dump(mode="json")), thread_id, progress, durability="sync"
            ),
        )
        refused = (after.request or {}).get("refused") if after.status == "awaiting_approval" else None
        if (
            refused
            and after.request
            and after.request.get("draft_id") == request.draft_id
            and not any(a.get("by") == identity.name for a in after.request.get("approvals") or [])
        ):
            raise DecisionRefused(409, refused)
    return before, after


Remembering = Literal["now", "later"]
_log = logging.getLogger(__name__)


def _remembering(
    run: Run, thread_id: str, memories: Remembering, step: Callable[[], ThreadView]
) -> ThreadView:
    """`step` (which advances the thread, under its lease), with what its outbox gains marked as
    waiting first, then copied into the memory store now if it can take it (`memories="now"`); the
    view says when the memory waits."""
    held = hold(run, thread_id)
    view = step()
    if memories == "now":
        try:
            waits = bool(deliver(run, run.deps.memory.at_once(), [thread_id], held=held).waiting)
        except Exception:  # the decision is recorded whatever the store did: its memory waits
            _log.warning("copying the memories of thread %s failed", thread_id, exc_info=True)
            waits = True
        if waits:
            view.message = f"{view.message}; {WAITING}" if view.message else WAITING
    return view


def _into_the_gate(
    run: Run, thread_id: str, progress: Progress | None, updates: dict[str, Any] | None = None
) -> ThreadView:
    """Move a thread paused by an earlier version's static gate (stopped before `publish`, with no
    request) into the gate: as if its draft had just been made, so `human_review` asks about it."""
    run.graph.update_state(config_for(thread_id), updates or None, as_node="draft_report")
    view = advance(run, None, thread_id, progress)
    if view.status != "awaiting_approval" or view.request is None:
        raise UserError(
            f"thread {thread_id} was paused by an earlier version and did not reach the approval gate "
            f"of this one (it is {view.status.replace('_', ' ')}); see 'market-analyst status {thread_id}'"
        )
    return view


def approve_thread(
    settings: Settings,
    thread_id: str,
    *,
    user: str | None = None,
    note: str = "",
    draft_id: str | None = None,
    allow_stale: bool = False,
    progress: Progress | None = None,
    announce: Announce | None = None,
) -> ThreadView:
    """Approve the current draft (or exactly `draft_id`) in the name of `user`, unverified (a name
    given at the command line), and publish once the quorum is met. A draft older than
    `MA_MAX_DRAFT_AGE` is refused unless `allow_stale`: its data may no longer hold."""
    identity = Identity(chosen_user(settings, user), verified=False, door="cli")
    _, after = decide(
        settings,
        thread_id,
        action="approve",
        identity=identity,
        note=note,
        draft_id=draft_id,
        allow_stale=allow_stale,
        progress=progress,
        announce=announce,
    )
    return _published(after)


def _published(view: ThreadView) -> ThreadView:
    """The view of a thread an approval has just run, refused unless it really was published: a
    command never reports a publication that did not happen."""
    if view.status == "awaiting_approval" and (view.request or {}).get("approvals"):
        return view  # counted towards the quorum: nothing is published yet, and the CLI says so
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


def reject_thread(
    settings: Settings,
    thread_id: str,
    *,
    reason: str,
    user: str | None = None,
    draft_id: str | None = None,
    announce: Announce | None = None,
) -> ThreadView:
    """Record a rejection with its reason and end the run; nothing is published."""
    validate_thread_id(thread_id)
    if not reason.strip():
        raise UserError("reject needs a reason: --reason 'why this draft should not be published'")
    identity = Identity(chosen_user(settings, user), verified=False, door="cli")
    _, after = decide(
        settings,
        thread_id,
        action="reject",
        identity=identity,
        note=reason.strip(),
        draft_id=draft_id,
        announce=announce,
    )
    return after


def resume_thread(settings: Settings, thread_id: str, *, progress: Progress | None = None) -> ThreadView:
    """Continue a thread from its last checkpoint, as far as it can go without a new decision."""
    validate_thread_id(thread_id)
    with open_run(settings, thread_id, progress=progress) as run:
        view = require_view(run.graph, thread_id)
        refuse_newer(thread_id, raw_values(run, thread_id))
        if view.status in ("in_progress", "approved_pending_publish"):
            view = _remembering(run, thread_id, "now", lambda: advance(run, None, thread_id, progress))
            view.message = "resumed" + (f"; {view.message}" if view.message else "")
        else:
            view.message = "nothing to resume"
        return view


def thread_status(settings: Settings, thread_id: str) -> ThreadView:
    """The saved state of a thread, read without taking its lease."""
    validate_thread_id(thread_id)
    with open_run(settings) as run:
        return require_view(run.graph, thread_id)
