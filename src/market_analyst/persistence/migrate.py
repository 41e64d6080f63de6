"""Copying the data directory's records into the PostgreSQL records database (`market-analyst
records migrate --to postgres`): the approvers with the session secret, the threads' data keys, the
audit log and the archive's documents. Store to store, reading the files only, safe to run again
(and run after the hosts switched, it copies what the files gained since), and never over a
different value the database holds already (that is counted as a conflict, or refused, naming what
differs).

Sessions and failed sign-in counts are not copied: they are short-lived, and approvers sign in again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.persistence.approvers.files import ApproverStore
from market_analyst.persistence.approvers.postgres import PostgresApproverStore
from market_analyst.persistence.archive.base import ArchiveError
from market_analyst.persistence.archive.document import parse_document
from market_analyst.persistence.archive.files import ReportArchive
from market_analyst.persistence.archive.postgres import CopyCounts, PostgresArchive, StoredDocument
from market_analyst.persistence.audit.base import NotCopied
from market_analyst.persistence.audit.files import AuditLog
from market_analyst.persistence.audit.postgres import PostgresAuditLog
from market_analyst.persistence.keys.base import WrappedKey
from market_analyst.persistence.keys.files import FileKeyStore
from market_analyst.persistence.keys.postgres import PostgresKeyStore
from market_analyst.persistence.postgres.records import RecordsTables
from market_analyst.persistence.postgres.server import PostgresServer

# Documents a copy sends in one transaction: few enough that a killed copy loses little work.
COPY_BATCH = 500

__all__ = [
    "COPY_BATCH",
    "AuditCopy",
    "CopyCounts",
    "KeyCopy",
    "copy_approvers",
    "copy_archive",
    "copy_audit",
    "copy_keys",
    "CopyMarks",
    "made_before",
]


class CopyMarks:
    """When each data directory's last complete copy started, in the records database: what a copy
    run again finds missing there and made before that moment was copied then and erased there since
    (a removed approver, a forgotten user's keys and reports), so it is not copied back."""

    def __init__(self, server: PostgresServer) -> None:
        self.tables = RecordsTables(
            server,
            "records-copies",
            ("CREATE TABLE ma_records_copies (source text PRIMARY KEY, started_at timestamptz NOT NULL)",),
        )

    def since(self, source: str) -> datetime | None:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT started_at FROM ma_records_copies WHERE source = %s", (source,))
            row = cur.fetchone()
        return row["started_at"] if row else None

    def mark(self, source: str, started: datetime) -> None:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO ma_records_copies (source, started_at) VALUES (%s, %s) "
                # Two copies finishing out of order keep the later start: everything made before it
                # was there when that copy ended.
                "ON CONFLICT (source) DO UPDATE "
                "SET started_at = GREATEST(ma_records_copies.started_at, EXCLUDED.started_at)",
                (source, started),
            )


def made_before(since: datetime | None) -> Callable[[Any], bool]:
    """Whether a record made at the given time (ISO text) is older than `since`: then, missing from
    the database, it was erased there. Never, on a first copy. A time that does not read is not
    older, but no time at all is (a key made before keys were dated)."""

    # Most records are dated to the second, truncated: one written just as the last copy began may
    # carry a time up to a second before it, so the two seconds before `since` count as newer. A time
    # to the microsecond (a data key's) names its moment on this host's clock, which `since` was read
    # from too: older is then before `since` itself, so a key made a moment before the copy is known
    # to have been copied, and is not copied back once erased there.
    coarse = since - timedelta(seconds=2) if since is not None else None

    def older(made: Any) -> bool:
        if since is None or coarse is None:
            return False
        try:
            at = datetime.fromisoformat(str(made).replace("Z", "+00:00"))
        except ValueError:
            return str(made) == ""  # a key made before keys were dated
        limit = since if "." in str(made) else coarse
        return (at if at.tzinfo else at.replace(tzinfo=UTC)) < limit

    return older


NOTHING_ERASED = made_before(None)  # a first copy: whatever the database lacks is copied


def copy_archive(
    source: ReportArchive,
    target: PostgresArchive,
    *,
    batch: int = COPY_BATCH,
    progress: Callable[[CopyCounts], None] | None = None,
    erased: Callable[[Any], bool] = NOTHING_ERASED,
) -> CopyCounts:
    """Copy every document of the directory archive `source` into `target`, reading the source only.

    Each batch is one transaction: the documents not yet there are inserted where neither key nor
    operation is taken, then every document of the batch is compared with its source file by the
    SHA-256 of its stored bytes. One there with other content is a conflict and is left alone. A
    copy killed part-way loses at most the batch in flight, and running it again finds the rest
    already present."""
    counts = CopyCounts()
    keys = _source_keys(source)
    with target.copying(counts, erased=lambda item: erased(item[1].get("created_at"))) as put:
        for start in range(0, len(keys), batch):
            chunk = [_read_source(source, key, counts) for key in keys[start : start + batch]]
            put([item for item in chunk if item is not None])
            if progress is not None:
                progress(counts)
    return counts


def _source_keys(source: ReportArchive) -> list[str]:
    """The document names in the source directory, without opening or indexing anything there."""
    if source.root.exists() and not source.root.is_dir():
        raise ArchiveError(
            f"MA_ARCHIVE_DIR {source.root} is a file, not a directory: point it at a directory"
        )
    return source.keys()


def _read_source(source: ReportArchive, key: str, counts: CopyCounts) -> StoredDocument | None:
    """A source document and its exact bytes, or None (with a line in `counts.unreadable`)."""
    try:
        path: Path = source.path_for(key)
        data = path.read_bytes()
        document = parse_document(data)
    except ArchiveError as exc:
        counts.unreadable.append(str(exc))
        return None
    except OSError as exc:
        counts.unreadable.append(f"cannot read {source.root / (key + '.json')}: {exc.strerror}")
        return None
    except ValueError as exc:
        counts.unreadable.append(f"{source.root / (key + '.json')} is not a valid report: {exc}")
        return None
    return key, document, data


def copy_approvers(
    source: ApproverStore, target: PostgresApproverStore, erased: Callable[[Any], bool] = NOTHING_ERASED
) -> tuple[int, int]:
    """Copy every approver (its token hash, so its token keeps working) and the session secret (so
    signed-in sessions stay signed in): (copied, present already), counting the secret as one.
    An approver or secret the target holds with another value is refused before anything is copied;
    one the target lacks that was made before the last copy (`erased`) was removed there, and stays
    removed."""
    secret = source.stored_session_secret()
    held = target.stored_session_secret()
    if secret is not None and held is not None and held != secret:
        raise UserError(
            "the records database has a session secret of its own, not the data directory's; nothing "
            "was copied (keeping either signs the other's sessions out: delete one to choose)"
        )
    names = {entry["name"] for entry in target.stored()}
    entries = [e for e in source.stored() if e["name"] in names or not erased(e.get("created_at"))]
    copied, present = target.put_stored(entries)
    if secret is not None:
        if target.put_session_secret(secret):
            copied += 1
        elif target.stored_session_secret() == secret:
            present += 1
        else:
            raise UserError(
                "another process made a session secret in the records database during the copy; the "
                "approvers were copied, the secret was not: run the copy again"
            )
    return copied, present


@dataclass
class AuditCopy:
    """What a copy of the audit log did: entries stored as they were, held already, appended after
    the database's own (their numbers in the source), and not copied (each named, with why)."""

    copied: int = 0
    present: int = 0
    carried: list[int] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def copy_audit(source: AuditLog, target: PostgresAuditLog) -> AuditCopy:
    """Copy the audit log's entries in order, as they are stored (numbers, links, hashes), holding its
    append lock so that it is read whole. The source must verify first, and the target after.

    Run again after hosts switched to the database, the database has entries of its own after the
    first copy's: an entry appended to the files since is then carried (appended after them, its
    content as it was, `copied_from` naming its place in the file). A target that shares no entry
    with the source (another log) is refused at its first entry."""
    with source.holding():
        found = source.verify()
        if found.problem is not None:
            raise UserError(f"the audit log does not verify ({found.problem}); nothing was copied")
        entries = source.stored()
    result = AuditCopy()
    event_of = {int(entry["seq"]): str(entry.get("event_id")) for entry in entries}
    shared = False  # whether both logs hold an entry: carried entries need a history in common
    for entry in entries:
        names = [event_of.get(int(seq), "") for seq in entry.get("erased_seqs") or []]
        try:
            outcome = target.append_stored(entry, carry=shared, names=names)
        except NotCopied as exc:
            if not (shared or exc.held):
                raise UserError(f"{exc}; nothing was copied") from None
            shared = True
            result.left.append(str(exc))
            continue
        shared = True
        if outcome == "copied":
            result.copied += 1
        elif outcome == "present":
            result.present += 1
        else:
            result.carried.append(int(entry["seq"]))
    after = target.verify()
    if after.problem is not None:
        raise UserError(f"the copied audit log does not verify: {after.problem}")
    return result


@dataclass
class KeyCopy:
    """What a copy of the data keys did: keys recorded, held already, and not copied (each named)."""

    copied: int = 0
    present: int = 0
    left: list[str] = field(default_factory=list)
    erased: int = 0  # missing there, made before the last copy: erased there since


def copy_keys(
    source: FileKeyStore,
    target: PostgresKeyStore,
    rewrap: Callable[[WrappedKey], WrappedKey],
    erased: Callable[[Any], bool] = NOTHING_ERASED,
) -> KeyCopy:
    """Copy every thread's data key (and a staged one) from the data directory, reading it only,
    wrapped as `rewrap` gives it (by the master key the database's hosts use): without its key a
    thread's checkpoints cannot be read. A thread whose key the database holds with another ID (made
    again there) is named, never overwritten."""
    result = KeyCopy()
    for digest, key in source.stored():
        held = target.by_digest(digest)
        if held is None and erased(key.created_at):  # its thread was erased there since the last copy
            result.erased += 1
            continue
        if held is None:
            held = target.put_stored(digest, rewrap(key))
            if held.key_id == key.key_id:
                result.copied += 1
                continue
        if held.key_id == key.key_id:
            result.present += 1
        else:
            result.left.append(f"thread {key.thread_id} (its key there is {held.key_id}, here {key.key_id})")
    return result
