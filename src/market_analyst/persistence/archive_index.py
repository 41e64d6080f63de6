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

INDEX_NAME = ".index.sqlite3"
_COLUMNS = "key, ticker, user_id, created_at, approved_by, recommendation, as_of, headline"


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
    """The index file of one archive directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / INDEX_NAME

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS reports (key TEXT PRIMARY KEY, ticker TEXT, user_id TEXT, "
            "created_at TEXT, approved_by TEXT, recommendation TEXT, as_of TEXT, headline TEXT, "
            "search_text TEXT, size INTEGER, mtime_ns INTEGER)"
        )
        return conn

    def add(self, key: str, document: dict[str, Any], path: Path) -> None:
        """Index a document just written; a failure is left to the next listing to repair."""
        try:
            stat = path.stat()
            with contextlib.closing(self._connect()) as conn:
                conn.execute(
                    "INSERT OR REPLACE INTO reports VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    _row(key, document, stat.st_size, stat.st_mtime_ns),
                )
        except (OSError, sqlite3.Error):
            pass  # the next listing indexes it from the document itself

    def _reconcile(
        self, conn: sqlite3.Connection, read: Reader, errors: tuple[type[Exception], ...]
    ) -> list[str]:
        """Bring the index in line with the directory; return one line per unreadable document."""
        on_disk: dict[str, tuple[int, int]] = {}
        for entry in os.scandir(self.root):
            if entry.name.endswith(".json") and not entry.name.startswith("."):
                stat = entry.stat()
                on_disk[entry.name[:-5]] = (stat.st_size, stat.st_mtime_ns)
        indexed = {
            k: (size, mtime) for k, size, mtime in conn.execute("SELECT key, size, mtime_ns FROM reports")
        }
        gone = [k for k in indexed if k not in on_disk]
        stale = [k for k, stamp in on_disk.items() if indexed.get(k) != stamp]
        problems: list[str] = []
        rows = []
        for key in sorted(stale):
            try:
                document = read(key)
            except errors as exc:
                problems.append(str(exc))
                gone.append(key)
                continue
            if document is not None:
                size, mtime = on_disk[key]
                rows.append(_row(key, document, size, mtime))
        if gone or rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM reports WHERE key = ?", [(k,) for k in gone])
            conn.executemany("INSERT OR REPLACE INTO reports VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
            conn.execute("COMMIT")
        return problems

    def search(
        self,
        read: Reader,
        errors: tuple[type[Exception], ...],
        *,
        ticker: str | None = None,
        user_id: str | None = None,
        text: str | None = None,
    ) -> Listing:
        """Reconcile, then the summaries matching every filter given, oldest first."""
        conn = self._connect()
        with contextlib.closing(conn):
            problems = self._reconcile(conn, read, errors)
            where, args = [], []
            if ticker:
                where.append("ticker = ?")
                args.append(ticker.upper())
            if user_id:
                where.append("user_id = ?")
                args.append(user_id)
            if text:
                where.append("instr(search_text, ?) > 0")
                args.append(text.casefold())
            sql = f"SELECT {_COLUMNS} FROM reports" + (" WHERE " + " AND ".join(where) if where else "")
            reports = [ReportSummary(*row) for row in conn.execute(sql + " ORDER BY created_at, key", args)]
        return Listing(reports, problems)
