"""Retention and erasure, with the savers' own `delete_thread`: `prune` removes finished threads older
than a cut-off, `forget` erases one user from every store. Neither touches a thread that waits for a
decision or is being advanced (each deletion holds the thread's lease and re-reads it first), and
both can simply be run again after a kill: every step is idempotent."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from market_analyst.deps import (
    compact_after_erasure,
    decision_seal,
    open_archive,
    open_audit,
    open_events,
    open_keyring,
    open_memory,
    open_profiles,
)
from market_analyst.errors import ThreadBusy, UserError
from market_analyst.ports import ProfileReader, ThreadQuery, ThreadRow
from market_analyst.settings import Settings, parse_duration
from market_analyst.state import validate_user_id
from market_analyst.workflow.graph_run import Run, open_run
from market_analyst.workflow.memory_outbox import before_erasing
from market_analyst.workflow.said_by import Quotes, SaidBy, SpeakerWords, Words, reports_of
from market_analyst.workflow.threads import backfill, record, stamp
from market_analyst.workflow.views import UnreadableThread, view_of

FINISHED = ("published", "rejected")
_PAGE = 1000


def _all_rows(run: Run, query: ThreadQuery) -> list[ThreadRow]:
    """Every row matching `query`, a page at a time."""
    rows: list[ThreadRow] = []
    while True:
        page, total = run.backend.index.query(replace(query, offset=len(rows)))
        rows += page
        if not page or len(rows) >= total:
            return rows


def _erase(run: Run, row: ThreadRow, allowed: tuple[str, ...] | None) -> tuple[bool, int]:
    """Delete one thread under its lease if its saved status is still `allowed` (any when None):
    (deleted, lease keys removed). A thread that is gone already only loses its row. One whose state
    cannot be read is erased only when any status is allowed (`forget`), as its row names its user."""
    with run.backend.lease(row.thread_id):
        try:
            view = view_of(run.graph, row.thread_id)
        except UnreadableThread:
            if allowed is not None:
                return False, 0
            keys = run.backend.erase_thread(row.thread_id)
            run.backend.index.remove(row.thread_id)
            return True, keys
        if view is not None and allowed is not None and view.status not in allowed:
            record(run, row.thread_id)  # the row was stale: it is not finished after all
            return False, 0
        keys = run.backend.erase_thread(row.thread_id) if view is not None else 0
        run.backend.index.remove(row.thread_id)
        return view is not None, keys


def _finished(run: Run, row: ThreadRow) -> bool:
    try:
        view = view_of(run.graph, row.thread_id)
    except UnreadableThread:
        return False  # not known to be finished: kept
    return view is not None and view.status in FINISHED


@dataclass
class PruneResult:
    """The finished threads removed (or, with --dry-run, that would be), and those that were busy."""

    threads: list[ThreadRow]
    busy: list[str] = field(default_factory=list)
    dry_run: bool = False


def prune_threads(settings: Settings, *, finished_before: str, dry_run: bool = False) -> PruneResult:
    """Remove published and rejected threads whose last update is at least `finished_before` old; their
    reports stay in the archive. A thread awaiting approval or in progress is never removed."""
    age = parse_duration(finished_before, "--finished-before")
    try:
        cutoff = stamp(settings.now() - age)
    except OverflowError:
        raise UserError(f"--finished-before {finished_before} reaches back before the year 1") from None
    with open_run(settings) as run:
        backfill(run, verify=True)  # a thread the index lacks would be missed: refuse
        if not dry_run:  # a finished thread's memories are kept when it goes: copied first
            before_erasing(run, open_memory(settings), "prune")
        rows = _all_rows(run, ThreadQuery(statuses=FINISHED, finished_before=cutoff, limit=_PAGE))
        if dry_run:
            return PruneResult([r for r in rows if _finished(run, r)], dry_run=True)
        result = PruneResult([])
        for row in rows:  # each re-read under its lease, and kept unless it is still finished
            try:
                if _erase(run, row, FINISHED)[0]:
                    result.threads.append(row)
            except ThreadBusy:
                result.busy.append(row.thread_id)
        _drop_orphan_keys(run, settings)
    if result.threads:
        compact_after_erasure(settings)
    return result


def _drop_orphan_keys(run: Run, settings: Settings) -> int:
    """Erase the data keys of threads that have no checkpoint left (a prune or forget killed between
    deleting a thread and its key); a thread being started now has its index row already, and keeps
    its key."""
    keyring = open_keyring(settings)
    stored = keyring.store.keys()
    if not stored:
        return 0
    alive = set(run.backend.thread_ids()) | run.backend.index.ids()
    return sum(keyring.forget_thread(key.thread_id) for key in stored if key.thread_id not in alive)


def memory_cutoff(settings: Settings, older_than: str) -> datetime:
    """The moment before which memories are pruned: `older_than` (an age such as 365d) ago."""
    age = parse_duration(older_than, "--memories-older-than")
    try:
        return settings.now() - age
    except OverflowError:
        raise UserError(f"--memories-older-than {older_than} reaches back before the year 1") from None


def prune_memories(settings: Settings, *, older_than: str, dry_run: bool = False) -> tuple[int, SaidBy]:
    """Erase every user's memories made at least `older_than` ago, after taking their texts out of the
    threads and reports that quoted them (`unquote`): how many went (or, with `dry_run`, would go),
    and where they were quoted."""
    cutoff = memory_cutoff(settings, older_than)
    store = open_memory(settings)
    if not dry_run:
        with open_run(settings) as run:
            before_erasing(run, store, "prune")
    going = store.holding(lambda memory: memory.created_at < cutoff)
    texts: dict[str, list[str]] = {}
    for memory in going:
        texts.setdefault(memory.owner, []).append(memory.text)
    quoted = unquote(settings, texts, why="pruned memories", dry_run=dry_run)
    if dry_run:
        return store.count_before(cutoff), quoted
    if quoted.busy:
        raise _busy(quoted.busy, "prune")
    return store.prune(cutoff), quoted


def unquote(settings: Settings, texts: dict[str, list[str]], *, why: str, dry_run: bool = False) -> SaidBy:
    """Take the texts of memories about to be erased (per owner) out of that owner's threads, which
    may have recalled them, and archived reports, which may quote them; see `said_by.Quotes`. Busy
    threads are kept and named, and the caller erases nothing then."""
    total = SaidBy()
    if not any(texts.values()):
        return total
    archive, audit = open_archive(settings), open_audit(settings)
    seal, at = decision_seal(settings), settings.now().isoformat(timespec="seconds")
    with open_run(settings) as run:
        for owner, said in sorted(texts.items()):
            quotes = Quotes(
                run,
                Words.of(owner, said),
                rows=_all_rows(run, ThreadQuery(user_id=owner, limit=_PAGE)),
                reports=functools.partial(reports_of, archive, owner.__eq__),
                archive=archive,
                audit=audit,
                why=why,
            )
            found = quotes.found() if dry_run else quotes.redact((seal, seal.for_doors()), at)
            total.threads += found.threads
            total.reports += found.reports
            total.busy += found.busy
            total.unreadable += found.unreadable
    if (total.threads or total.reports) and not dry_run:
        compact_after_erasure(settings)
    return total


def _busy(threads: list[str], command: str) -> UserError:
    return UserError(
        f"{len(threads)} thread(s) were busy and kept: {', '.join(threads)}; run {command} again"
    )


@dataclass
class ForgetResult:
    """What was erased (or would be, with --dry-run), per store."""

    user_id: str
    threads: list[str] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)
    profile: int = 0
    data_keys: int = 0  # the keys that sealed their threads' checkpoints: every copy went with them
    lease_keys: int = 0
    audit_entries: int = 0  # audit entries whose personal content was erased (the chain is kept)
    events: int | None = None  # notification events removed or with their name taken out (None: none kept)
    memories: int = 0  # what later runs would have recalled for the user, superseded ones included
    # Their words in other people's records (`said_by`): found, and with --including-said-by redacted.
    said_by: SaidBy = field(default_factory=SaidBy)
    said_by_redacted: bool = False
    busy: list[str] = field(default_factory=list)
    dry_run: bool = False


def forget_user(
    settings: Settings, user: str, *, dry_run: bool = False, including_said_by: bool = False
) -> ForgetResult:
    """Erase `user` everywhere: the threads they started, their archived reports (documents and index
    rows), their profile, their memories, and the threads' lease keys. Their words in other people's
    records are found and counted, and with `including_said_by` taken out (see `said_by`); nothing
    else of another user's is touched."""
    result = ForgetResult(validate_user_id(user), dry_run=dry_run)
    keyring = open_keyring(settings)
    with open_run(settings) as run:
        backfill(run, verify=True)  # a thread the index lacks would be missed: refuse
        if not dry_run:  # what waits for the memory store goes in first, so that it is erased too
            before_erasing(run, open_memory(settings), "forget")
        rows = _all_rows(run, ThreadQuery(user_id=user, limit=_PAGE))
        theirs = {row.thread_id for row in rows}
        words = SpeakerWords(  # read before anything of theirs goes: the audit log names their words
            run,
            user,
            others=[row for row in _all_rows(run, ThreadQuery(limit=_PAGE)) if row.thread_id not in theirs],
            memories=open_memory(settings),
            archive=open_archive(settings),
            audit=open_audit(settings),
        )
        if including_said_by and not dry_run:
            seal, at = decision_seal(settings), settings.now().isoformat(timespec="seconds")
            result.said_by = words.redact((seal, seal.for_doors()), at)
            result.said_by_redacted = True
            if result.said_by.busy:  # stop before anything of theirs goes: the audit log names their words
                raise _busy(result.said_by.busy, "forget")
        else:
            result.said_by = words.found()
        keys = {k.thread_id for k in keyring.store.keys() if k.owner == user or k.thread_id in theirs}
        for row in rows:
            if dry_run:
                result.threads.append(row.thread_id)
                continue
            try:
                erased, lease_keys = _erase(run, row, None)
            except ThreadBusy:
                result.busy.append(row.thread_id)
                continue
            result.lease_keys += lease_keys
            if erased:
                result.threads.append(row.thread_id)
        if dry_run:
            result.data_keys = len(keys)
        else:
            # The keys of threads erased before a kill, or whose checkpoints are gone: not a busy one.
            for thread_id in keys - set(result.busy):
                keyring.forget_thread(thread_id)
            left = {k.thread_id for k in keyring.store.keys()}
            result.data_keys = len(keys - left)
    archive = open_archive(settings)
    result.reports = [summary.key for summary in archive.search(user_id=user).reports]
    profiles = open_profiles(settings)
    memories = open_memory(settings)
    if dry_run:
        result.profile = int(_has_profile(profiles, user))
        result.memories = len(memories.list(user, include_superseded=True))
        result.audit_entries = sum(
            1 for entry in open_audit(settings).entries() if user in _people(entry) and not entry["erased"]
        )
        return result
    for key in result.reports:
        archive.remove(key)
    result.profile = int(profiles.delete(user))  # readable or not, it goes
    result.memories = memories.forget_user(user)
    result.audit_entries = open_audit(settings).erase_user(user, settings.now().isoformat(timespec="seconds"))
    if settings.notifies:  # not sent to anyone after this, nor kept
        result.events = open_events(settings).erase_user(user, set(result.threads) | theirs)
    compact_after_erasure(settings)
    return result


def _people(entry: dict[str, Any]) -> set[str]:
    """Who an audit entry names: the one it was for and everyone who decided."""
    return {str(entry.get("requester") or ""), *str(entry.get("actor") or "").split(", ")}


def _has_profile(profiles: ProfileReader, user: str) -> bool:
    try:
        return profiles.get(user) is not None
    except UserError:  # stored but no longer valid: forget would erase it all the same
        return True
