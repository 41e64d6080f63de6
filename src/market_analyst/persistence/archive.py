"""The report archive: one JSON document per published report, written atomically, exactly once.

A document's key derives from its operation ID (thread ID + draft ID), which the application owns:
publishing the same operation again finds the existing document and returns it instead of writing a
second one; the same operation with different content is refused, never overwritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError

SCHEMA_VERSION = 1
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
MAX_KEY_LENGTH = 128
INDEX_NAME = ".index.sqlite3"


class ArchiveError(UserError):
    """The archive refused a key or a write, or holds a document it cannot read."""


@dataclass(frozen=True)
class PublishResult:
    """The stored document and whether this call wrote it (False: it already existed)."""

    key: str
    document: dict[str, Any]
    created: bool


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


def operation_key(ticker: str, as_of: str, operation_id: str) -> str:
    """The archive key of an operation: readable prefix, digest of the operation ID."""
    digest = hashlib.sha256(operation_id.encode()).hexdigest()[:16]
    return f"{ticker.lstrip('^')}-{as_of}-{digest}"


def render_document(document: dict[str, Any]) -> bytes:
    """The canonical bytes of a document: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


class ReportArchive:
    """JSON documents in one directory. The directory is created on first write."""

    def __init__(self, root: Path) -> None:
        self.root = root

    # -- keys and paths ---------------------------------------------------------------------------

    def path_for(self, key: str) -> Path:
        """The file of `key`, or `ArchiveError` when the key could name anything outside the root."""
        if (
            not key
            or len(key) > MAX_KEY_LENGTH
            or "/" in key
            or "\\" in key
            or ".." in key
            or os.path.isabs(key)
            or not _KEY.fullmatch(key)
        ):
            raise ArchiveError(
                f"invalid archive key {key[:40]!r}: use letters, digits, '-', '_' and single dots; "
                "no path separators, no '..', nothing absolute"
            )
        path = self.root / f"{key}.json"
        if path.is_symlink() or path.exists():
            real_root = self.root.resolve()
            real = path.resolve()
            if real.parent != real_root:
                raise ArchiveError(f"archive key {key!r} is a link that leaves the archive root {self.root}")
        return path

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArchiveError(f"cannot create archive directory {self.root}: {exc.strerror}") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise ArchiveError(f"cannot write to archive directory {self.root}: permission denied")

    # -- writing ----------------------------------------------------------------------------------

    def publish(self, key: str, document: dict[str, Any]) -> PublishResult:
        """Store `document` under `key` once; a repeat of the same document returns the stored one.

        The write is atomic: a temporary file in the archive directory, fsync, a hard link to the
        final name (which fails if it exists, so two writers cannot both win), then an fsync of the
        directory so the new name survives a crash.
        """
        path = self.path_for(key)
        self._ensure_root()
        payload = render_document(document)
        tmp = self.root / f".{key}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
                created = True
            except FileExistsError:
                created = False
        except OSError as exc:
            raise ArchiveError(f"cannot write {path}: {exc.strerror}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        self._fsync_root()
        if created:
            self._index_document(key, document)
            return PublishResult(key, document, True)
        existing = self.path_for(key).read_bytes()
        if existing != payload:
            stored = self._parse(key, existing)
            if stored.get("operation_id") != document.get("operation_id"):
                raise ArchiveError(f"archive key {key} already holds another operation's report")
            raise ArchiveError(
                f"operation {document.get('operation_id')} was already published with different content "
                f"({path}); refusing to overwrite it"
            )
        return PublishResult(key, json.loads(existing), False)

    def _fsync_root(self) -> None:
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- reading ----------------------------------------------------------------------------------

    def _parse(self, key: str, data: bytes) -> dict[str, Any]:
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ArchiveError(
                f"archive document {self.root / (key + '.json')} is corrupted: {exc}"
            ) from None
        if not isinstance(document, dict) or "schema_version" not in document:
            raise ArchiveError(f"archive document {self.root / (key + '.json')} is not a report")
        return document

    def get(self, key: str) -> dict[str, Any] | None:
        """The document stored under `key`, None if there is none; `ArchiveError` if unreadable."""
        path = self.path_for(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ArchiveError(f"cannot read archive document {path}: {exc.strerror}") from None
        return self._parse(key, data)

    def keys(self) -> list[str]:
        """Keys of every document file, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name[:-5]
            for p in self.root.iterdir()
            if p.name.endswith(".json") and not p.name.startswith(".")
        )

    # -- the index ------------------------------------------------------------------------------
    #
    # Documents are the truth; `.index.sqlite3` is a cache of their summaries so that listing and
    # searching need not parse every file. Each listing reconciles the index with the directory by
    # name, size and modification time, so a document written by a process that died before indexing
    # it, or changed or damaged afterwards, is (re)read then.

    @property
    def index_path(self) -> Path:
        """The SQLite file that caches document summaries."""
        return self.root / INDEX_NAME

    def _connect_index(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.index_path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS reports (key TEXT PRIMARY KEY, ticker TEXT, user_id TEXT, "
            "created_at TEXT, approved_by TEXT, recommendation TEXT, as_of TEXT, headline TEXT, "
            "search_text TEXT, size INTEGER, mtime_ns INTEGER)"
        )
        return conn

    @staticmethod
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

    def _index_document(self, key: str, document: dict[str, Any]) -> None:
        path = self.path_for(key)
        try:
            stat = path.stat()
            with contextlib.closing(self._connect_index()) as conn:
                conn.execute(
                    "INSERT OR REPLACE INTO reports VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    self._row(key, document, stat.st_size, stat.st_mtime_ns),
                )
        except (OSError, sqlite3.Error):
            pass  # the next listing indexes it from the document itself

    def _reconcile(self, conn: sqlite3.Connection) -> list[str]:
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
                document = self.get(key)
            except ArchiveError as exc:
                problems.append(str(exc))
                gone.append(key)
                continue
            if document is not None:
                size, mtime = on_disk[key]
                rows.append(self._row(key, document, size, mtime))
        if gone or rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM reports WHERE key = ?", [(k,) for k in gone])
            conn.executemany("INSERT OR REPLACE INTO reports VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
            conn.execute("COMMIT")
        return problems

    def search(
        self, *, ticker: str | None = None, user_id: str | None = None, text: str | None = None
    ) -> Listing:
        """Reports matching every filter given (ticker and user exactly, text as a case-blind
        substring of the report), oldest first, plus a line for each unreadable document."""
        if not self.root.is_dir():
            return Listing([], [])
        try:
            conn = self._connect_index()
        except sqlite3.Error as exc:
            raise ArchiveError(f"cannot open the archive index {self.index_path}: {exc}") from None
        with contextlib.closing(conn):
            problems = self._reconcile(conn)
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
            sql = (
                "SELECT key, ticker, user_id, created_at, approved_by, recommendation, as_of, headline "
                "FROM reports"
                + (" WHERE " + " AND ".join(where) if where else "")
                + " ORDER BY created_at, key"
            )
            reports = [ReportSummary(*row) for row in conn.execute(sql, args)]
        return Listing(reports, problems)

    def list(self) -> Listing:
        """Every readable report, oldest first, plus a line for each unreadable document."""
        return self.search()
