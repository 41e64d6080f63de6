"""The archive's index: a SQLite cache of document summaries, so that listing and searching need not
parse every file.

Documents are the truth. Each listing reconciles the index with the directory by name, size and
modification time, so a document written by a process that died before indexing it, or changed or
damaged afterwards, is (re)read then.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from market_analyst.files import private_file

INDEX_NAME = ".index.sqlite3"
_COLUMNS = "key, ticker, user_id, created_at, approved_by, recommendation, as_of, headline"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS reports (key TEXT PRIMARY KEY, ticker TEXT, user_id TEXT, "
    "created_at TEXT, approved_by TEXT, recommendation TEXT, as_of TEXT, headline TEXT, "
    "search_text TEXT, size INTEGER, mtime_ns INTEGER)"
)
_INSERT = "INSERT OR REPLACE INTO reports VALUES (?,?,?,?,?,?,?,?,?,?,?)"


@dataclass(frozen=True)
class ReportSummary:
    """The fields `reports list` and `reports search` show, as the index keeps them."""

    key: str
    ticker: str
    user_id: str | None
    created_at: str
    approved_by: str
    recommendation: str
    as_of: str
    headline: str

    def to_json(self) -> dict[str, Any]:
        """The summary as plain data."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Listing:
    """Summaries of readable documents, and one line for each document that could not be read."""

    reports: list[ReportSummary]
    problems: list[str]


def _row(key: str, document: dict[str, Any], size: int, mtime_ns: int) -> tuple[Any, ...]:
    report = document.get("report") or {}
    text = " ".join(
        str(part)
        for part in (
            key,
            document.get("ticker"),
            document.get("user_id"),
            report.get("headline"),
            document.get("markdown"),
        )
    )
    return (
        key,
        document.get("ticker", ""),
        document.get("user_id"),
        document.get("created_at", ""),
        document.get("approved_by", ""),
        report.get("recommendation", ""),
        document.get("as_of", ""),
        report.get("headline", ""),
        text.casefold(),
        size,
        mtime_ns,
    )


# Reads one document by key: the document, None if it vanished, or an exception naming the problem.
Reader = Callable[[str], "dict[str, Any] | None"]


class ArchiveIndex:
    """The index file of one archive directory. It is a cache: one that cannot be read is rebuilt from
    the documents, and an archive that cannot be written is indexed in memory for the listing."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / INDEX_NAME

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)
        except sqlite3.Error:
            conn.close()
            raise
        for suffix in ("", "-wal", "-shm"):
            private_file(Path(f"{self.path}{suffix}"))
        return conn

    def _in_memory(self) -> sqlite3.Connection:
        """A private copy of the index (or an empty one) for an archive this process cannot write."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        with contextlib.suppress(sqlite3.Error):
            source = sqlite3.connect(f"{self.path.resolve().as_uri()}?immutable=1", uri=True)
            with contextlib.closing(source):
                source.backup(conn)
        conn.execute(_SCHEMA)
        return conn

    def _discard(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")

    def _open(self) -> sqlite3.Connection:
        """The index file, or an in-memory copy when this process cannot write the archive."""
        if not os.access(self.root, os.W_OK):
            return self._in_memory()
        try:
            return self._connect()
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc) or "unable to open" in str(exc):
                return self._in_memory()
            raise

    def add(self, key: str, document: dict[str, Any], path: Path) -> None:
        """Index a document just written; a failure is left to the next listing to repair."""
        try:
            stat = path.stat()
            with contextlib.closing(self._connect()) as conn:
                conn.execute(_INSERT, _row(key, document, stat.st_size, stat.st_mtime_ns))
        except (OSError, sqlite3.Error):
            pass  # the next listing indexes it from the document itself

    def _on_disk(self, problems: list[str]) -> dict[str, tuple[int, int]]:
        """Name, size and modification time of every document file; links are named and skipped."""
        found: dict[str, tuple[int, int]] = {}
        for entry in os.scandir(self.root):
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            if entry.is_symlink():
                problems.append(f"skipped {entry.path}: a link, not a report")
                continue
            if entry.is_file(follow_symlinks=False):
                stat = entry.stat(follow_symlinks=False)
                found[entry.name[:-5]] = (stat.st_size, stat.st_mtime_ns)
        return found

    def _reconcile(
        self, conn: sqlite3.Connection, read: Reader, errors: tuple[type[Exception], ...], problems: list[str]
    ) -> None:
        """Bring the index in line with the directory, adding a line to `problems` per unreadable document."""
        on_disk = self._on_disk(problems)
        indexed = {
            k: (size, mtime) for k, size, mtime in conn.execute("SELECT key, size, mtime_ns FROM reports")
        }
        gone = [k for k in indexed if k not in on_disk]
        rows = []
        for key in sorted(k for k, stamp in on_disk.items() if indexed.get(k) != stamp):
            try:
                document = read(key)
            except errors as exc:
                problems.append(f"skipped {exc}")
                gone.append(key)
                continue
            if document is not None:
                rows.append(_row(key, document, *on_disk[key]))
        if gone or rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM reports WHERE key = ?", [(k,) for k in gone])
            conn.executemany(_INSERT, rows)
            conn.execute("COMMIT")

    def _query(
        self,
        conn: sqlite3.Connection,
        read: Reader,
        errors: tuple[type[Exception], ...],
        problems: list[str],
        filters: dict[str, str | None],
    ) -> list[ReportSummary]:
        self._reconcile(conn, read, errors, problems)
        where, args = [], []
        if filters.get("ticker"):
            where.append("ticker = ?")
            args.append(str(filters["ticker"]).upper())
        if filters.get("user_id"):
            where.append("user_id = ?")
            args.append(str(filters["user_id"]))
        if filters.get("text"):
            where.append("instr(search_text, ?) > 0")
            args.append(str(filters["text"]).casefold())
        sql = f"SELECT {_COLUMNS} FROM reports" + (" WHERE " + " AND ".join(where) if where else "")
        return [ReportSummary(*row) for row in conn.execute(sql + " ORDER BY created_at, key", args)]

    def search(
        self,
        read: Reader,
        errors: tuple[type[Exception], ...],
        *,
        ticker: str | None = None,
        user_id: str | None = None,
        text: str | None = None,
    ) -> Listing:
        """Reconcile, then the summaries matching every filter given, oldest first. An index file that
        is not a database (overwritten, truncated) is rebuilt from the documents, with one line."""
        filters = {"ticker": ticker, "user_id": user_id, "text": text}
        problems: list[str] = []
        try:
            with contextlib.closing(self._open()) as conn:
                return Listing(self._query(conn, read, errors, problems, filters), problems)
        except sqlite3.OperationalError:
            raise  # busy or out of space: the index may be fine; say so rather than discard it
        except sqlite3.DatabaseError as exc:
            problems = [
                f"the archive index {self.path} was unreadable ({exc}); rebuilt it from the documents"
            ]
        self._discard()
        with contextlib.closing(self._open()) as conn:
            return Listing(self._query(conn, read, errors, problems, filters), problems)
