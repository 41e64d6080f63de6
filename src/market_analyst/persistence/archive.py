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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError

SCHEMA_VERSION = 1
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
MAX_KEY_LENGTH = 128


class ArchiveError(UserError):
    """The archive refused a key or a write, or holds a document it cannot read."""


@dataclass(frozen=True)
class PublishResult:
    """The stored document and whether this call wrote it (False: it already existed)."""

    key: str
    document: dict[str, Any]
    created: bool


@dataclass(frozen=True)
class ListedReport:
    """One readable document, or the name of one that could not be read."""

    key: str
    document: dict[str, Any] | None
    problem: str | None = None


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
            or not _KEY.match(key)
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
            raise ArchiveError(f"archive document {self.root / (key + '.json')} is corrupted: {exc}") from None
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
        return sorted(p.name[:-5] for p in self.root.iterdir() if p.name.endswith(".json") and not p.name.startswith("."))

    def list(self) -> list[ListedReport]:
        """Every document, oldest first; unreadable ones are returned with the problem named."""
        listed: list[ListedReport] = []
        for key in self.keys():
            try:
                document = self.get(key)
            except ArchiveError as exc:
                listed.append(ListedReport(key, None, str(exc)))
                continue
            if document is not None:
                listed.append(ListedReport(key, document))
        listed.sort(key=lambda r: ((r.document or {}).get("created_at", ""), r.key))
        return listed
