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
from pathlib import Path
from typing import Any

from market_analyst.files import private_file
from market_analyst.ports import Listing, ReportSummary

__all__ = ["ArchiveIndex", "Listing", "ReportSummary", "search_text"]

INDEX_NAME = ".index.sqlite3"
_COLUMNS = "key, ticker, user_id, created_at, approved_by, recommendation, as_of, headline"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS reports (key TEXT PRIMARY KEY, ticker TEXT, user_id TEXT, "
    "created_at TEXT, approved_by TEXT, recommendation TEXT, as_of TEXT, headline TEXT, "
    "search_text TEXT, size INTEGER, mtime_ns INTEGER)"
)
_INSERT = "INSERT OR REPLACE INTO reports VALUES (?,?,?,?,?,?,?,?,?,?,?)"


def search_text(key: str, document: dict[str, Any]) -> str:
    """What `reports search` matches text against: the key, ticker, user, headline and Markdown,
    case-folded (both archives keep the same text, so they find the same reports)."""
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
    return text.casefold()


def _row(key: str, document: dict[str, Any], size: int, mtime_ns: int) -> tuple[Any, ...]:
    report = document.get("report") or {}
    return (
        key,
        document.get("ticker", ""),
        document.get("user_id"),
        document.get("created_at", ""),
        document.get("approved_by", ""),
        report.get("recommendation", ""),
        document.get("as_of", ""),
        report.get("headline", ""),
        search_text(key, document),
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

    def remove(self, key: str) -> None:
        """Drop the row of a document that was deleted; a failure is left to the next listing."""
        try:
            with contextlib.closing(self._connect()) as conn:
                conn.execute("DELETE FROM reports WHERE key = ?", (key,))
        except (OSError, sqlite3.Error):
            pass

    def _names(self, problems: list[str]) -> set[str]:
        """The keys of the document files, from the directory listing alone (no file is opened or
        stat'ed); links are named in `problems` and left out."""
        found = set()
        for entry in os.scandir(self.root):
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            if entry.is_symlink():
                problems.append(f"skipped {entry.path}: a link, not a report")
            elif entry.is_file(follow_symlinks=False):
                found.add(entry.name[:-5])
        return found

    def _read_rows(
        self, keys: list[str], read: Reader, errors: tuple[type[Exception], ...], problems: list[str]
    ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Index rows for `keys`, read from their documents; and the keys that could not be read."""
        rows, bad = [], []
        for key in keys:
            try:
                stat = os.stat(self.root / f"{key}.json", follow_symlinks=False)
                document = read(key)
            except FileNotFoundError:
                bad.append(key)
                continue
            except errors as exc:
                problems.append(f"skipped {exc}")
                bad.append(key)
                continue
            if document is not None:
                rows.append(_row(key, document, stat.st_size, stat.st_mtime_ns))
        return rows, bad

    def _apply(self, conn: sqlite3.Connection, rows: list[tuple[Any, ...]], gone: list[str]) -> None:
        if rows or gone:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM reports WHERE key = ?", [(k,) for k in gone])
            conn.executemany(_INSERT, rows)
            conn.execute("COMMIT")

    def _reconcile(
        self, conn: sqlite3.Connection, read: Reader, errors: tuple[type[Exception], ...], problems: list[str]
    ) -> None:
        """Bring the index's list of documents in line with the directory by name: new documents are
        read and indexed, rows of documents that went are dropped."""
        names = self._names(problems)
        indexed = {key for (key,) in conn.execute("SELECT key FROM reports")}
        rows, bad = self._read_rows(sorted(names - indexed), read, errors, problems)
        self._apply(conn, rows, sorted(indexed - names) + bad)

    def _checked(
        self,
        conn: sqlite3.Connection,
        found: list[tuple[Any, ...]],
        read: Reader,
        errors: tuple[type[Exception], ...],
        problems: list[str],
    ) -> list[ReportSummary]:
        """The summaries to show, each checked against its file: one changed since it was indexed is
        read again (and left out, with a line in `problems`, if it no longer reads)."""
        shown, changed = [], []
        for *summary, size, mtime in found:
            key = summary[0]
            try:
                stat = os.stat(self.root / f"{key}.json", follow_symlinks=False)
            except FileNotFoundError:
                changed.append(key)
                continue
            if (stat.st_size, stat.st_mtime_ns) == (size, mtime):
                shown.append(ReportSummary(*summary))
                continue
            changed.append(key)
        rows, bad = self._read_rows(changed, read, errors, problems)
        self._apply(conn, rows, bad)
        fresh = {row[0]: ReportSummary(*row[:8]) for row in rows}
        rank = {summary[0]: i for i, (*summary, _, _) in enumerate(found)}
        return sorted([*shown, *fresh.values()], key=lambda r: rank[r.key])

    def _query(
        self,
        conn: sqlite3.Connection,
        read: Reader,
        errors: tuple[type[Exception], ...],
        problems: list[str],
        filters: dict[str, Any],
    ) -> tuple[list[ReportSummary], int]:
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
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        total = int(conn.execute(f"SELECT count(*) FROM reports{clause}", args).fetchone()[0])
        newest_first = (
            f"SELECT {_COLUMNS}, size, mtime_ns FROM reports{clause} ORDER BY created_at DESC, key DESC"
        )
        found = conn.execute(newest_first + " LIMIT ?", [*args, filters["limit"]]).fetchall()
        # What matched beyond the page: the rows the check dropped are gone from the index, not "more".
        return self._checked(conn, found, read, errors, problems), max(0, total - len(found))

    def search(
        self,
        read: Reader,
        errors: tuple[type[Exception], ...],
        *,
        ticker: str | None = None,
        user_id: str | None = None,
        text: str | None = None,
        limit: int = 50,
    ) -> Listing:
        """Reconcile, then the newest `limit` summaries matching every filter given, and how many more
        match. An index file that is not a database (overwritten, truncated) is rebuilt from the
        documents, with one line."""
        filters = {"ticker": ticker, "user_id": user_id, "text": text, "limit": limit}
        problems: list[str] = []
        try:
            with contextlib.closing(self._open()) as conn:
                reports, more = self._query(conn, read, errors, problems, filters)
                return Listing(reports, problems, more)
        except sqlite3.OperationalError:
            raise  # busy or out of space: the index may be fine; say so rather than discard it
        except sqlite3.DatabaseError as exc:
            problems = [
                f"the archive index {self.path} was unreadable ({exc}); rebuilt it from the documents"
            ]
        self._discard()
        with contextlib.closing(self._open()) as conn:
            reports, more = self._query(conn, read, errors, problems, filters)
            return Listing(reports, problems, more)
