"""Copying the data directory's records into the PostgreSQL records database (`market-analyst
records migrate --to postgres`): the archive's documents, the approvers with the session secret, and
the audit log. Store to store, reading the files only, safe to run again, and never over a different
value the database holds already (that is counted as a conflict, or refused, naming what differs).

Sessions and failed sign-in counts are not copied: they are short-lived, and approvers sign in again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from market_analyst.errors import UserError
from market_analyst.persistence.approvers.files import ApproverStore
from market_analyst.persistence.approvers.postgres import PostgresApproverStore
from market_analyst.persistence.archive.base import ArchiveError
from market_analyst.persistence.archive.document import parse_document
from market_analyst.persistence.archive.files import ReportArchive
from market_analyst.persistence.archive.postgres import CopyCounts, PostgresArchive, StoredDocument
from market_analyst.persistence.audit.files import AuditLog
from market_analyst.persistence.audit.postgres import PostgresAuditLog

# Documents a copy sends in one transaction: few enough that a killed copy loses little work.
COPY_BATCH = 500

__all__ = ["COPY_BATCH", "CopyCounts", "copy_approvers", "copy_archive", "copy_audit"]


def copy_archive(
    source: ReportArchive,
    target: PostgresArchive,
    *,
    batch: int = COPY_BATCH,
    progress: Callable[[CopyCounts], None] | None = None,
) -> CopyCounts:
    """Copy every document of the directory archive `source` into `target`, reading the source only.

    Each batch is one transaction: the documents not yet there are inserted where neither key nor
    operation is taken, then every document of the batch is compared with its source file by the
    SHA-256 of its stored bytes. One there with other content is a conflict and is left alone. A
    copy killed part-way loses at most the batch in flight, and running it again finds the rest
    already present."""
    counts = CopyCounts()
    keys = _source_keys(source)
    with target.copying(counts) as put:
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


def copy_approvers(source: ApproverStore, target: PostgresApproverStore) -> tuple[int, int]:
    """Copy every approver (its token hash, so its token keeps working) and the session secret (so
    signed-in sessions stay signed in): (copied, present already), counting the secret as one.
    An approver or secret the target holds with another value is refused before anything is copied."""
    secret = source.stored_session_secret()
    held = target.stored_session_secret()
    if secret is not None and held is not None and held != secret:
        raise UserError(
            "the records database has a session secret of its own, not the data directory's; nothing "
            "was copied (keeping either signs the other's sessions out: delete one to choose)"
        )
    copied, present = target.put_stored(source.stored())
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


def copy_audit(source: AuditLog, target: PostgresAuditLog) -> tuple[int, int]:
    """Copy the audit log's entries in order, as they are stored (numbers, links, hashes): (copied,
    present already). The source must verify first, and the target after; a target that holds
    entries the source does not, or different ones, is refused."""
    found = source.verify()
    if found.problem is not None:
        raise UserError(f"the audit log does not verify ({found.problem}); nothing was copied")
    copied = present = 0
    for entry in source.stored():
        if target.append_stored(entry):
            copied += 1
        else:
            present += 1
    after = target.verify()
    if after.problem is not None:
        raise UserError(f"the copied audit log does not verify: {after.problem}")
    if after.entries != found.entries:
        raise UserError(
            f"the records database's audit log has {after.entries} entries, the data directory's "
            f"{found.entries}: it holds entries of its own, so the two logs were not merged"
        )
    return copied, present
