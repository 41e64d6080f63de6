"""The audit log in the data directory (`MA_RECORDS=files`): the chain of `base.py`, one entry a
line of `audit/audit.jsonl`, and the last entry's number and hash in `audit.head`.

Appends from any number of processes are serialised by an exclusive lock on `.audit.lock`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.files import FILE_MODE, exclusive_lock, fsync_dir, private_dir
from market_analyst.persistence.audit.base import AuditChain, canonical, erase, next_entry
from market_analyst.ports import AuditEvent


class AuditLog(AuditChain):
    """The hash-chained audit log in `root` (the data directory's `audit/`)."""

    NO_HEAD = "the log's head record (audit.head) is missing"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "audit.jsonl"
        self.head_path = root / "audit.head"

    # -- the file ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.root, "the audit log")
        with exclusive_lock(
            self.root / ".audit.lock",
            lambda exc: UserError(f"cannot open the audit log in {self.root}: {exc.strerror or exc}"),
        ):
            yield

    def _lines(self) -> list[bytes]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise UserError(f"cannot read the audit log {self.path}: {exc.strerror or exc}") from None
        return [line for line in data.split(b"\n") if line.strip()]

    def _write_head(self, seq: int, digest: str) -> None:
        tmp = self.head_path.with_name(f".audit.head.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            os.write(fd, canonical({"seq": seq, "hash": digest}).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.head_path)

    def _append_line(self, entry: dict[str, Any]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            os.write(fd, canonical(entry).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        self._write_head(entry["seq"], entry["hash"])

    @staticmethod
    def _parse(stored: bytes | str, number: int) -> dict[str, Any]:
        try:
            entry = json.loads(stored)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise UserError(
                f"audit entry on line {number} is not JSON: run 'market-analyst audit verify'"
            ) from None
        if not isinstance(entry, dict):
            raise UserError(
                f"audit entry on line {number} is not an object: run 'market-analyst audit verify'"
            )
        return entry

    # -- writing ----------------------------------------------------------------------------------

    def append(self, event: AuditEvent) -> dict[str, Any]:
        """Append `event` as the next entry of the chain and return it; an event whose `event_id` the
        log holds already is not appended again (the earlier entry is returned)."""
        with self._locked():
            lines = self._lines()
            entries = [self._parse(line, i + 1) for i, line in enumerate(lines)]
            for entry in entries:
                if entry.get("event_id") == event.event_id:
                    return entry
            last = entries[-1] if entries else None
            entry = next_entry(event, last)
            self._append_line(entry)
            if last is None:
                fsync_dir(self.root)
        return entry

    def erase_user(self, user_id: str, at: str) -> int:
        """Replace `user_id`'s personal content (as the one who decided or the one it was for) in every
        entry with an erasure marker, and record the erasure as an entry of its own (which names the
        entries, not the person). Returns how many entries were erased; the chain still verifies."""
        with self._locked():
            lines = self._lines()
            entries = [self._parse(line, i + 1) for i, line in enumerate(lines)]
            erased, marker = erase(entries, user_id, at)
            if marker is None:
                return 0
            body = b"".join(canonical(entry).encode() + b"\n" for entry in entries)
            tmp = self.path.with_name(f".audit.jsonl.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            try:
                os.write(fd, body)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            fsync_dir(self.root)
            self._append_line(marker)
        return len(erased)

    # -- reading ----------------------------------------------------------------------------------

    def _thread_entries(self, thread_id: str | None) -> list[dict[str, Any]]:
        found = []
        for number, line in enumerate(self._lines(), start=1):
            entry = self._parse(line, number)
            if thread_id is None or entry.get("thread_id") == thread_id:
                found.append(entry)
        return found

    def _chain(self) -> tuple[list[tuple[int, bytes]], dict[str, Any] | None]:
        return list(enumerate(self._lines(), start=1)), self._head()

    def _head(self) -> dict[str, Any] | None:
        try:
            head = json.loads(self.head_path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return head if isinstance(head, dict) else {}
