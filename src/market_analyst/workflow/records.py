"""`records migrate --to postgres`: carry what the data directory's files hold into the PostgreSQL
records database, so that several hosts can share it (`MA_RECORDS=postgres`).

Store by store, the source is only read; what the database already holds identically is counted,
not written again, so a copy killed part-way is simply run again; what it holds with other content
is refused and named, never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from market_analyst.deps import (
    compact_after_erasure,
    copy_approvals_to_records,
    copy_archive_to_records,
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
    """What `records migrate` did, store by store."""

    stores: list[StoreCopy] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether anything was written."""
        return any(store.copied for store in self.stores)


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:NAMED])
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def migrate_records(settings: Settings, *, to: str) -> RecordsMigration:
    """Copy the approvers and the session secret, the audit log (its chain verified before and after)
    and the report archive (verified byte for byte) into the records database, in that order;
    `UserError` (one line, counts included) when the database holds something else under the same
    name, key or operation, or a source cannot be read. Each store's copy is safe to run again."""
    if to not in TARGETS:
        raise UserError(f"records migrate --to {to!r}: the only target is postgres")
    result = RecordsMigration()
    approvals = copy_approvals_to_records(settings)
    where = records_location(settings)
    result.stores.append(
        StoreCopy(
            "approvers",
            "approvers and secret",
            *approvals["approvers"],
            str(settings.data_dir),
            where,
            "names, roles, token hashes and the session secret as stored",
        )
    )
    audit_dir = str(settings.data_dir / "audit")
    result.stores.append(
        StoreCopy("audit", "entries", *approvals["audit"], audit_dir, where, "the chain verifies, in order")
    )
    counts, source, target = copy_archive_to_records(settings)
    done = f"{counts.copied} copied, {counts.present} already present"
    if counts.conflicts:
        raise UserError(
            f"archive: {len(counts.conflicts)} reports in {source} differ from those {target} holds under "
            f"the same key or operation ({_named(counts.conflicts)}); nothing was overwritten ({done})"
        )
    if counts.unreadable:
        raise UserError(
            f"archive: {len(counts.unreadable)} documents in {source} could not be copied "
            f"({_named(counts.unreadable)}); the others were ({done})"
        )
    result.stores.append(
        StoreCopy(
            "archive",
            "reports",
            counts.copied,
            counts.present,
            source,
            target,
            "every one identical byte for byte",
        )
    )
    return result


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
