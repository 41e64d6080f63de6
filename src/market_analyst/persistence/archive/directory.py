"""The report archive: one JSON document per published report, written atomically, exactly once.

A document's key derives from its operation ID (thread ID + draft ID), which the application owns:
publishing the same operation again finds the existing document and returns it instead of writing a
second one; the same operation with different content is refused, never overwritten. The document
schema is in `document.py`, the listing index in `index.py`; `postgres.py` holds the same archive
in PostgreSQL (`MA_RECORDS=postgres`).

The archive never creates links, so a link inside it is damage: it is neither followed nor listed.
Files are owner-only (0600 in a 0700 directory).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.files import fsync_dir, private_dir, refuse_under_file, write_new_private
from market_analyst.persistence.archive.document import build_document, parse_document, render_document
from market_analyst.persistence.archive.index import ArchiveIndex, Listing
from market_analyst.ports import PublishRequest, PublishResult

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
MAX_KEY_LENGTH = 128
# A temporary file older than this was left by a process that died between writing and linking it.
STALE_TEMP_SECONDS = 60.0


class ArchiveError(UserError):
    """The archive refused a key or a write, or holds a document it cannot read."""


def valid_key(key: str) -> str:
    """`key` if it can only name a file inside the archive, else `ArchiveError`."""
    if not key or len(key) > MAX_KEY_LENGTH or os.path.isabs(key) or not _KEY.fullmatch(key) or ".." in key:
        raise ArchiveError(
            f"invalid archive key {key[:40]!r}: use letters, digits, '-', '_' and single dots; "
            "no path separators, no '..', nothing absolute"
        )
    return key


class ReportArchive:
    """JSON documents in one directory. The directory is created on first write."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.index = ArchiveIndex(root)

    @property
    def location(self) -> str:
        """The archive directory, for messages."""
        return str(self.root)

    def check(self) -> str:
        """ "ok" when the directory, or the nearest ancestor that would hold it, can be written."""
        root = self.root
        while not root.exists():
            root = root.parent
        if root.is_dir() and os.access(root, os.W_OK | os.X_OK):
            return "ok"
        return f"cannot write to archive directory {self.root}"

    # -- keys and paths ---------------------------------------------------------------------------

    def path_for(self, key: str) -> Path:
        """The file of `key`, or `ArchiveError` when the key could name anything but a plain file here."""
        path = self.root / f"{valid_key(key)}.json"
        if path.is_symlink():
            outside = path.resolve().parent != self.root.resolve()
            detail = "a link that leaves the archive root" if outside else "a link, not a report"
            raise ArchiveError(f"archive document {path} is {detail}; refusing it")
        return path

    def _check_root(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise ArchiveError(
                f"MA_ARCHIVE_DIR {self.root} is a file, not a directory: point it at a directory"
            )
        refuse_under_file(self.root, "the archive directory")  # it could never hold a report

    def _ensure_root(self) -> None:
        self._check_root()
        private_dir(self.root, "the archive directory")
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise ArchiveError(f"cannot write to archive directory {self.root}: permission denied")

    # -- writing ----------------------------------------------------------------------------------

    def publish_report(self, request: PublishRequest) -> PublishResult:
        """Publish the document of an approved draft under its operation's key (`ports.ArchiveWriter`)."""
        document = build_document(request)
        return self.publish(document["key"], document)

    def publish(self, key: str, document: dict[str, Any]) -> PublishResult:
        """Store `document` under `key` once; a repeat of the same document returns the stored one.

        The write is atomic: a temporary file in the archive directory, fsync, a hard link to the
        final name (which fails if it exists, so two writers cannot both win), then an fsync of the
        directory so the new name survives a crash.
        """
        path = self.path_for(key)
        self._ensure_root()
        payload = render_document(document)
        created = self._write_once(path, payload)
        fsync_dir(self.root)
        self._remove_stale_temporaries()
        if created:
            self.index.add(key, document, path)
            return PublishResult(key, document, True)
        existing = self.get(key) or {}
        if render_document(existing) != payload:
            if existing.get("operation_id") != document.get("operation_id"):
                raise ArchiveError(f"archive key {key} already holds another operation's report")
            raise ArchiveError(
                f"operation {document.get('operation_id')} was already published with different content "
                f"({path}); refusing to overwrite it"
            )
        return PublishResult(key, existing, False)

    def _write_once(self, path: Path, payload: bytes) -> bool:
        """Write `payload` to `path` unless it exists; True if this call created it."""
        tmp = self.root / f".{path.stem}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            write_new_private(tmp, payload)
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                return False
        except OSError as exc:
            raise ArchiveError(f"cannot write {path}: {exc.strerror}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def _remove_stale_temporaries(self) -> None:
        """Remove temporary files a killed writer left between its link and its unlink."""
        cutoff = time.time() - STALE_TEMP_SECONDS
        for entry in os.scandir(self.root):
            if (
                entry.name.startswith(".")
                and entry.name.endswith(".tmp")
                and entry.is_file(follow_symlinks=False)
            ):
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)

    def remove(self, key: str) -> bool:
        """Delete the document under `key` and its index row; False when there was none."""
        path = self.path_for(key)
        try:
            path.unlink()
        except FileNotFoundError:
            removed = False
        except OSError as exc:
            raise ArchiveError(f"cannot remove {path}: {exc.strerror}") from None
        else:
            removed = True
            fsync_dir(self.root)
        self.index.remove(key)
        return removed

    # -- reading ----------------------------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any] | None:
        """The document stored under `key`, None if there is none; `ArchiveError` naming the file if it
        cannot be read or is not a valid report."""
        self._check_root()
        path = self.path_for(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ArchiveError(f"cannot read archive document {path}: {exc.strerror}") from None
        try:
            return parse_document(data)
        except ValueError as exc:
            raise ArchiveError(f"archive document {path} is corrupted: {exc}") from None

    def keys(self) -> list[str]:
        """Keys of every document file, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name[:-5]
            for p in self.root.iterdir()
            if p.name.endswith(".json") and not p.name.startswith(".")
        )

    def search(
        self,
        *,
        ticker: str | None = None,
        user_id: str | None = None,
        text: str | None = None,
        limit: int = 1_000_000,
    ) -> Listing:
        """The newest `limit` reports matching every filter given (ticker and user exactly, text as a
        case-blind substring of the report), a line for each unreadable document, and how many more
        matched. Only the listed documents are read; the rest of the directory is compared by name."""
        self._check_root()
        if not self.root.is_dir():
            return Listing([], [])
        try:
            return self.index.search(
                self.get, (ArchiveError,), ticker=ticker, user_id=user_id, text=text, limit=limit
            )
        except sqlite3.OperationalError as exc:
            raise ArchiveError(f"cannot use the archive index {self.index.path}: {exc}") from None

    def list(self) -> Listing:
        """Every readable report, newest first, plus a line for each unreadable document."""
        return self.search()
