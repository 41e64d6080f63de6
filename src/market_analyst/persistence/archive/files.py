"""The report archive: one JSON document per published report, written atomically, exactly once.

A document's key derives from its operation ID (thread ID + draft ID), which the application owns:
publishing the same operation again finds the existing document and returns it instead of writing a
second one; the same operation with different content is refused, never overwritten (the rule both
archives share, in `base.py`). The document schema is in `document.py`, the listing index in
`index.py`; `postgres.py` holds the same archive in PostgreSQL (`MA_RECORDS=postgres`).

The archive never creates links, so a link inside it is damage: it is neither followed nor listed.
Files are owner-only (0600 in a 0700 directory).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from market_analyst.files import exclusive_lock, fsync_dir, private_dir, refuse_under_file, write_new_private
from market_analyst.persistence.archive.base import Archive, ArchiveError, Query, settle_repeat, valid_key
from market_analyst.persistence.archive.document import parse_document, render_document
from market_analyst.persistence.archive.index import ArchiveIndex, Listing
from market_analyst.ports import PublishResult

# A temporary file older than this was left by a process that died between writing and linking it.
STALE_TEMP_SECONDS = 60.0


class ReportArchive(Archive):
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
        return settle_repeat(key, document, payload, self.get(key) or {}, str(path))

    def redact(
        self, key: str, change: Callable[[dict[str, Any]], dict[str, Any]], record: Callable[[str, str], None]
    ) -> tuple[str, str] | None:
        path = self.path_for(key)
        self._check_root()
        # Two redactions of one document at once: one after the other, each from what the other left.
        with exclusive_lock(self.root / ".redact.lock", self._lock_refused):
            old = self._read(path)
            if old is None:
                return None
            try:
                stored = parse_document(old)
            except ValueError as exc:
                raise ArchiveError(f"archive document {path} is corrupted: {exc}") from None
            document = change(stored)
            payload = render_document(document)
            if payload == old:
                return None
            hashes = hashlib.sha256(old).hexdigest(), hashlib.sha256(payload).hexdigest()
            record(*hashes)
            tmp = self.root / f".{path.stem}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
            try:
                write_new_private(tmp, payload)
                os.replace(tmp, path)  # whole: the old document or the new one
            except OSError as exc:
                raise ArchiveError(f"cannot write {path}: {exc.strerror}") from None
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
            fsync_dir(self.root)
        self.index.add(key, document, path)
        return hashes

    def _lock_refused(self, exc: OSError) -> ArchiveError:
        return ArchiveError(f"cannot lock the archive {self.root}: {exc.strerror}")

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
        data = self._read(path)
        if data is None:
            return None
        try:
            return parse_document(data)
        except ValueError as exc:
            raise ArchiveError(f"archive document {path} is corrupted: {exc}") from None

    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ArchiveError(f"cannot read archive document {path}: {exc.strerror}") from None

    def keys(self) -> list[str]:
        """Keys of every document file, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name[:-5]
            for p in self.root.iterdir()
            if p.name.endswith(".json") and not p.name.startswith(".")
        )

    def _search(self, query: Query) -> Listing:
        """The reports `query` asks for through the index, and a line for each unreadable document.
        Only the listed documents are read; the rest of the directory is compared by name."""
        self._check_root()
        if not self.root.is_dir():
            return Listing([], [])
        try:
            return self.index.search(
                self.get,
                (ArchiveError,),
                ticker=query.ticker,
                user_id=query.user_id,
                text=query.text,
                limit=query.limit,
            )
        except sqlite3.OperationalError as exc:
            raise ArchiveError(f"cannot use the archive index {self.index.path}: {exc}") from None
