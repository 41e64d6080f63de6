"""Listing threads as an operator reads them, from the thread index: newest first, filtered, paged.

The index is a cache the commands keep current (a row is written when a thread starts and after
every command that advances it). The saver stays the truth: each row a listing shows is checked
against the thread's saved state and corrected, and a backend whose threads predate the index is
backfilled once, from the saver."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from market_analyst.errors import UserError
from market_analyst.ports import ThreadQuery, ThreadRow
from market_analyst.settings import Settings
from market_analyst.state import validate_user_id
from market_analyst.workflow.graph_run import open_run
from market_analyst.workflow.views import ThreadStatus, ThreadView, UnreadableThread, view_of

DEFAULT_LIMIT = 50
MAX_LIMIT = 10_000
# A listed row and the thread's view (None where its state cannot be read).
Checked = tuple[ThreadRow, ThreadView | None]


def row_for(view: ThreadView, now: str) -> ThreadRow:
    """The index row of a thread as its view shows it, updated `now`."""
    draft = view.draft or {}
    return ThreadRow(
        thread_id=view.thread_id,
        user_id=view.user_id or "",
        ticker=view.ticker or "",
        status=view.status,
        created_at=_stamp_of(view.started_at) or _stamp_of(view.updated_at) or now,
        updated_at=now,
        drafted_at=view.drafted_at,
        revision=int(draft.get("revision") or 0),
        recommendation=draft.get("recommendation"),
    )


def record(run: Any, thread_id: str) -> ThreadView | None:
    """Write the thread's row as its saved state stands now (drop it when the thread is gone); the
    view it was written from."""
    view = view_of(run.graph, thread_id)
    if view is None:
        run.backend.index.remove(thread_id)
    else:
        run.backend.index.record(row_for(view, stamp(run.settings.now())))
    return view


def backfill(run: Any, *, verify: bool = False, everything: bool = False) -> None:
    """Give every thread the saver holds a row, once (threads made before the index existed).

    Once the index is complete every command keeps it so; only a writer that does not know the index
    (a version from before it, run on the same data) makes threads it lacks, which listings, `prune`
    and `forget` would then silently miss. `verify` looks for such threads and refuses with the way
    on; `everything` rebuilds every row from the saver (that way on: `threads --reindex`)."""
    index = run.backend.index
    if index.complete() and not everything:
        if verify:
            _refuse_unindexed(run)
        return
    known = set() if everything else index.ids()
    for thread_id in run.backend.thread_ids():
        try:
            view = view_of(run.graph, thread_id) if thread_id not in known else None
        except UnreadableThread:
            continue  # `status` names it and refuses; a listing cannot describe it
        if view is not None:
            updated = _stamp_of(view.updated_at) or stamp(run.settings.now())
            index.record(row_for(view, updated))
    index.mark_complete()


def _refuse_unindexed(run: Any) -> None:
    missing = sorted(t for t in set(run.backend.thread_ids()) - run.backend.index.ids() if _readable(run, t))
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise UserError(
            f"the checkpointer holds {len(missing)} thread(s) the thread index does not list ({shown}): a "
            "version of market-analyst from before the index (or another program) wrote them after this "
            "one indexed the store, so listings, prune and forget would miss them; run one version on "
            "this data, then 'market-analyst threads --reindex' indexes every thread again"
        )


def _readable(run: Any, thread_id: str) -> bool:
    """Whether a listing could describe the thread (one strict deserialisation refuses is never
    indexed: `status` names it instead)."""
    try:
        return view_of(run.graph, thread_id) is not None
    except UnreadableThread:
        return False


def stamp(moment: datetime) -> str:
    """A row's time stamp: UTC to the microsecond, in one format, so that stamps compare as text."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _stamp_of(iso: str | None) -> str | None:
    return stamp(datetime.fromisoformat(iso)) if iso else None


@dataclass(frozen=True)
class ThreadPage:
    """The rows shown, and how many more match."""

    rows: list[ThreadRow]
    more: int

    def to_json(self, now: datetime) -> list[dict[str, Any]]:
        """The listed fields, with the draft's age in seconds."""
        return [
            asdict(row) | {"draft_age_seconds": draft_age_seconds(row.drafted_at, now)} for row in self.rows
        ]


def draft_age_seconds(drafted_at: str | None, now: datetime) -> int | None:
    """How old a draft made at `drafted_at` is at `now`, in whole seconds."""
    if not drafted_at:
        return None
    return max(0, int((now - datetime.fromisoformat(drafted_at)).total_seconds()))


def _checked(run: Any, rows: list[ThreadRow], query: ThreadQuery) -> list[Checked]:
    """The rows, each checked against the saver and paired with the thread's view: a stale row is
    corrected, and dropped when it no longer matches the query (a command killed between its
    checkpoint and its row). A thread whose state cannot be read keeps the row the index has for it,
    with no view."""
    checked: list[Checked] = []
    for row in rows:
        try:
            view = view_of(run.graph, row.thread_id)
        except UnreadableThread:
            checked.append((row, None))
            continue
        if view is None:
            run.backend.index.remove(row.thread_id)
            continue
        if view.status != row.status:  # dated by the thread's latest checkpoint, as prune reads it
            row = row_for(view, _stamp_of(view.updated_at) or row.updated_at)
            run.backend.index.record(row)
        if not query.statuses or row.status in query.statuses:
            checked.append((row, view))
    return checked


def checked_threads(
    run: Any, query: ThreadQuery, *, verify: bool = False, reindex: bool = False
) -> tuple[list[Checked], int]:
    """In an open run: the threads matching `query` as `_checked` pairs them, and how many more match
    (`verify` and `reindex` as `backfill` takes them)."""
    backfill(run, verify=verify, everything=reindex)
    rows, total = run.backend.index.query(query)
    return _checked(run, rows, query), max(0, total - len(rows))


def list_threads(
    settings: Settings,
    *,
    statuses: tuple[ThreadStatus, ...] = (),
    user: str | None = None,
    ticker: str | None = None,
    limit: int = DEFAULT_LIMIT,
    reindex: bool = False,
) -> ThreadPage:
    """Threads matching every filter, newest update first, at most `limit`, and how many more match;
    refused while the saver holds threads the index lacks, unless `reindex` rebuilds it first."""
    from market_analyst.market_data import normalize_ticker

    query = ThreadQuery(
        statuses=statuses,
        user_id=validate_user_id(user) if user is not None else None,
        ticker=normalize_ticker(ticker) if ticker is not None else None,
        limit=max(1, min(limit, MAX_LIMIT)),
    )
    with open_run(settings) as run:
        shown, more = checked_threads(run, query, verify=True, reindex=reindex)
    return ThreadPage([row for row, _ in shown], more)
