"""Copying the data directory's records into the PostgreSQL records database (`market-analyst
records migrate --to postgres`): the archive's documents. Store to store, reading the files only,
safe to run again, and never over a different value the database holds already (that is counted as
a conflict, naming what differs).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from market_analyst.persistence.archive.base import ArchiveError
from market_analyst.persistence.archive.document import parse_document
from market_analyst.persistence.archive.files import ReportArchive
from market_analyst.persistence.archive.postgres import CopyCounts, PostgresArchive, StoredDocument

# Documents a copy sends in one transaction: few enough that a killed copy loses little work.
COPY_BATCH = 500

__all__ = ["COPY_BATCH", "CopyCounts", "copy_archive"]


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
