"""Retention and erasure, with the savers' own `delete_thread`: `prune` removes finished threads older
than a cut-off, `forget` erases one user from every store. Neither touches a thread that waits for a
decision or is being advanced (each deletion holds the thread's lease and re-reads it first), and
both can simply be run again after a kill: every step is idempotent."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from market_analyst.deps import (
    compact_after_erasure,
    open_archive,
    open_audit,
    open_keyring,
    open_memory,
    open_profiles,
)
from market_analyst.errors import ThreadBusy, UserError
from market_analyst.ports import ProfileReader, ThreadQuery, ThreadRow
from market_analyst.settings import Settings, parse_duration
from market_analyst.state import validate_user_id
from market_analyst.workflow.graph_run import Run, open_run
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


def prune_memories(settings: Settings, *, older_than: str, dry_run: bool = False) -> int:
    """Erase every user's memories made at least `older_than` ago; returns how many went (or, with
    `dry_run`, would go)."""
    cutoff = memory_cutoff(settings, older_than)
    store = open_memory(settings)
    return store.count_before(cutoff) if dry_run else store.prune(cutoff)


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
    memories: int = 0  # what later runs would have recalled for the user, superseded ones included
    busy: list[str] = field(default_factory=list)
    dry_run: bool = False


def forget_user(settings: Settings, user: str, *, dry_run: bool = False) -> ForgetResult:
    """Erase `user` everywhere: the threads they started, their archived reports (documents and index
    rows), their profile, their memories, and the threads' lease keys. Another user's data is not
    touched."""
    result = ForgetResult(validate_user_id(user), dry_run=dry_run)
    keyring = open_keyring(settings)
    with open_run(settings) as run:
        backfill(run, verify=True)  # a thread the index lacks would be missed: refuse
        rows = _all_rows(run, ThreadQuery(user_id=user, limit=_PAGE))
        theirs = {row.thread_id for row in rows}
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
