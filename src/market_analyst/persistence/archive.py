"""The report archive: one JSON document per published report, written atomically, exactly once.

A document's key derives from its operation ID (thread ID + draft ID), which the application owns:
publishing the same operation again finds the existing document and returns it instead of writing a
second one; the same operation with different content is refused, never overwritten. The document
schema is in `archive_document.py`, the listing index in `archive_index.py`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.persistence.archive_document import build_document, render_document
from market_analyst.persistence.archive_index import ArchiveIndex, Listing
from market_analyst.ports import PublishRequest, PublishResult

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
MAX_KEY_LENGTH = 128


class ArchiveError(UserError):
    """The archive refused a key or a write, or holds a document it cannot read."""


class ReportArchive:
    """JSON documents in one directory. The directory is created on first write."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.index = ArchiveIndex(root)

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
            self.index.add(key, document, path)
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

    def search(
        self, *, ticker: str | None = None, user_id: str | None = None, text: str | None = None
    ) -> Listing:
        """Reports matching every filter given (ticker and user exactly, text as a case-blind
        substring of the report), oldest first, plus a line for each unreadable document."""
        if not self.root.is_dir():
            return Listing([], [])
        try:
            return self.index.search(self.get, (ArchiveError,), ticker=ticker, user_id=user_id, text=text)
        except sqlite3.Error as exc:
            raise ArchiveError(f"cannot open the archive index {self.index.path}: {exc}") from None

    def list(self) -> Listing:
        """Every readable report, oldest first, plus a line for each unreadable document."""
        return self.search()
