"""`records migrate --to postgres`: carry what the data directory's files hold into the PostgreSQL
records database, so that several hosts can share it (`MA_RECORDS=postgres`).

Store by store, the source is only read; what the database already holds identically is counted,
not written again, so a copy killed part-way is simply run again; what it holds with other content
is refused and named, never overwritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from market_analyst.deps import (
    compact_after_erasure,
    copy_approvers_to_records,
    copy_archive_to_records,
    copy_audit_to_records,
    copy_keys_to_records,
    made_before,
    records_copy_marks,
    records_location,
)
from market_analyst.errors import UserError
from market_analyst.settings import Settings

TARGETS = ("postgres",)
# How many conflicting or unreadable keys an error line names before it says "and N more".
NAMED = 3


@dataclass(frozen=True)
class StoreCopy:
    """One store's copy: how many items were copied, how many were there already (identical), and
    where from and to."""

    store: str
    unit: str
    copied: int
    present: int
    source: str
    target: str
    checked: str  # how the copy was checked

    def to_json(self) -> dict[str, Any]:
        """The copy as plain data."""
        return dict(self.__dict__)


@dataclass
class RecordsMigration:
    """What `records migrate` did, store by store, and what it could not copy (one line a store)."""

    stores: list[StoreCopy] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Whether a record the database lacks was made before the last complete copy (so erased there).
    erased: Callable[[Any], bool] = field(default=lambda made: False, repr=False)

    @property
    def changed(self) -> bool:
        """Whether anything was written."""
        return any(store.copied for store in self.stores)


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:NAMED])
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def _numbers(seqs: list[int]) -> str:
    return _named([str(n) for n in seqs])


def migrate_records(settings: Settings, *, to: str) -> RecordsMigration:
    """Copy the approvers and the session secret, the threads' data keys, the audit log (its chain
    verified before and after) and the report archive (verified byte for byte) into the records
    database, in that order. Each store is copied whatever happened to the one before: what a store
    could not copy (the database holds something else under the same name, key or event, or a source
    cannot be read) is a line in `problems`, counts included. Each store's copy is safe to run again,
    and run after hosts switched to the database, it copies what the files gained since."""
    if to not in TARGETS:
        raise UserError(f"records migrate --to {to!r}: the only target is postgres")
    result = RecordsMigration()
    where = records_location(settings)
    marks, source = records_copy_marks(settings), str(settings.data_dir.resolve())
    started = datetime.now(UTC)
    result.erased = made_before(marks.since(source))
    for step in (_approvers, _keys, _audit, _archive):
        try:
            step(settings, where, result)
        except UserError as exc:
            result.problems.append(str(exc))
    if not result.problems:  # everything made before `started` is now there, or was copied before
        marks.mark(source, started)
    return result


def _approvers(settings: Settings, where: str, result: RecordsMigration) -> None:
    copied, present = copy_approvers_to_records(settings, result.erased)
    result.stores.append(
        StoreCopy(
            "approvers",
            "approvers and secret",
            copied,
            present,
            str(settings.data_dir),
            where,
            "names, roles, token hashes and the session secret as stored",
        )
    )


def _keys(settings: Settings, where: str, result: RecordsMigration) -> None:
    keys, source, target = copy_keys_to_records(settings, result.erased)
    checked = "each wrapped by the hosts' master key" + _erased_since(keys.erased, "threads' keys")
    result.stores.append(StoreCopy("keys", "data keys", keys.copied, keys.present, source, target, checked))
    if keys.left:
        result.problems.append(
            f"keys: {len(keys.left)} threads have another data key in {target} ({_named(keys.left)}); "
            "theirs was kept (the thread was made again there, or given a new key on either side since "
            "the copy)"
        )


def _audit(settings: Settings, where: str, result: RecordsMigration) -> None:
    audit = copy_audit_to_records(settings)
    checked = "the chain verifies, in order"
    if audit.carried:
        checked += (
            f"; {len(audit.carried)} appended after the database's own entries "
            f"(entries {_numbers(audit.carried)} of the file, named in copied_from)"
        )
    source = str(settings.data_dir / "audit")
    result.stores.append(
        StoreCopy(
            "audit", "entries", audit.copied + len(audit.carried), audit.present, source, where, checked
        )
    )
    if audit.left:
        result.problems.append(
            f"audit: {len(audit.left)} entries of {source} were not copied ({_named(audit.left)}); "
            "the others were"
        )


def _archive(settings: Settings, where: str, result: RecordsMigration) -> None:
    counts, source, target = copy_archive_to_records(settings, erased=result.erased)
    done = f"{counts.copied} copied, {counts.present} already present"
    if counts.conflicts:
        result.problems.append(
            f"archive: {len(counts.conflicts)} reports in {source} differ from those {target} holds under "
            f"the same key or operation ({_named(counts.conflicts)}); nothing was overwritten ({done})"
        )
    if counts.unreadable:
        result.problems.append(
            f"archive: {len(counts.unreadable)} documents in {source} could not be copied "
            f"({_named(counts.unreadable)}); the others were ({done})"
        )
    if not counts.conflicts and not counts.unreadable:
        result.stores.append(
            StoreCopy(
                "archive",
                "reports",
                counts.copied,
                counts.present,
                source,
                target,
                "every one identical byte for byte" + _erased_since(counts.erased, "reports"),
            )
        )


def _erased_since(count: int, what: str) -> str:
    return f"; {count} {what} erased there since the last copy, not copied back" if count else ""


@dataclass
class Encryption:
    """What `records encrypt` did: values sealed per thread, and the threads it could not take."""

    threads: int = 0  # threads looked at
    sealed: dict[str, int] = field(default_factory=dict)  # thread -> values sealed now
    busy: list[str] = field(default_factory=list)


def encrypt_threads(settings: Settings) -> Encryption:
    """Seal what threads written before checkpoint encryption hold in clear, thread by thread under
    its lease, each in one transaction: run again after a kill, it goes on where it stopped. A thread
    being advanced is left for the next run (`busy`)."""
    from market_analyst.errors import ThreadBusy
    from market_analyst.workflow.graph_run import open_run
    from market_analyst.workflow.threads import backfill

    result = Encryption()
    with open_run(settings) as run:
        backfill(run)  # so each new key is recorded under its thread's owner
        for thread_id in run.backend.thread_ids():
            result.threads += 1
            try:
                with run.backend.lease(thread_id):
                    sealed = run.backend.seal_thread(thread_id)
            except ThreadBusy:
                result.busy.append(thread_id)
                continue
            if sealed:
                result.sealed[thread_id] = sealed
    if result.sealed:
        compact_after_erasure(settings)  # the clear copies, now dead tuples and old WAL, go too
    return result
