"""The audit log in the data directory (`MA_RECORDS=files`): the chain of `base.py`, one entry a
line of `audit/audit.jsonl`, and the last entry's number and hash in `audit.head`.

Appends from any number of processes are serialised by an exclusive lock on `.audit.lock`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.files import (
    FILE_MODE,
    exclusive_lock,
    fsync_dir,
    private_dir,
    write_all,
    write_new_private,
)
from market_analyst.persistence.audit.base import AuditChain, canonical, erase, next_entry
from market_analyst.ports import AuditEvent, Verification


class AuditLog(AuditChain):
    """The hash-chained audit log in `root` (the data directory's `audit/`)."""

    NO_HEAD = "the log's head record (audit.head) is missing"
    HEAD_MAY_LAG = True  # the entry is appended and fsynced, then audit.head replaced

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "audit.jsonl"
        self.head_path = root / "audit.head"
        self._held = False  # within `holding`

    # -- the file ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.root, "the audit log")
        with exclusive_lock(
            self.root / ".audit.lock",
            lambda exc: UserError(f"cannot open the audit log in {self.root}: {exc.strerror or exc}"),
        ):
            yield

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the append lock for the block, so that no entry is appended meanwhile (a copy reads
        one whole log); appenders wait their turn. A log that does not exist yet is not made."""
        if not self.root.is_dir():
            yield
            return
        with contextlib.ExitStack() as held:
            # A log in a place this process cannot write to (no lock file) is read as it stands, as
            # `_chain` reads it: nothing appends to it there.
            with contextlib.suppress(OSError):
                held.enter_context(exclusive_lock(self.root / ".audit.lock"))
            self._held = True  # this process's own reads no longer take the lock (flock would wait on it)
            try:
                yield
            finally:
                self._held = False

    def _read(self) -> tuple[list[bytes], bytes]:
        """The log's entries, one a line, and what follows them that is not one: the part of an entry
        a write cut short (a full disk or a kill, in a release that took a short write for a whole
        one), which was never recorded. Every entry is written with its newline; a last line without
        one that is an entry all the same (a hand edit) is an entry."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [], b""
        except OSError as exc:
            raise UserError(f"cannot read the audit log {self.path}: {exc.strerror or exc}") from None
        complete, _, rest = data.rpartition(b"\n")
        lines = [line for line in complete.split(b"\n") if line.strip()]
        if not rest.strip():
            return lines, b""
        try:
            whole = isinstance(json.loads(rest), dict)
        except (UnicodeDecodeError, json.JSONDecodeError):
            whole = False
        return ([*lines, rest], b"") if whole else (lines, rest)

    def _lines(self) -> list[bytes]:
        return self._read()[0]

    def _cut_torn(self) -> None:
        """Before a write (holding the lock): set a part-written entry the log ends in aside, in
        `audit.jsonl.torn-<time>` beside it, and cut it from the log, so that the next entry starts
        on a line of its own and nothing of what was there is lost."""
        _, torn = self._read()
        if not torn:
            return
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        try:
            write_new_private(self.root / f"{self.path.name}.torn-{stamp}", torn)
            with open(self.path, "r+b") as log:
                log.truncate(log.seek(0, os.SEEK_END) - len(torn))
                os.fsync(log.fileno())
        except OSError as exc:
            raise _unwritten(self.path, exc, "the entry was not written") from None
        fsync_dir(self.root)

    @staticmethod
    def _prepared(path: Path, data: bytes) -> Path:
        """A temporary file beside `path` holding all of `data`, fsynced, to rename onto it; or
        `OSError`, with nothing left behind."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    @staticmethod
    def _head_line(seq: int, digest: str) -> bytes:
        return canonical({"seq": seq, "hash": digest}).encode() + b"\n"

    def _write_head(self, seq: int, digest: str) -> None:
        os.replace(self._prepared(self.head_path, self._head_line(seq, digest)), self.head_path)

    def _append_line(self, entry: dict[str, Any]) -> None:
        """The entry appended and the head moved to it, or neither: a disk that fills up midway gets
        the log cut back to the entry before (a short write left part of a line, which would make
        every later read of the log refuse) and one line saying the entry was not written."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise _unwritten(self.path, exc, "the entry was not written") from None
        try:
            size = os.fstat(fd).st_size
            try:
                write_all(fd, canonical(entry).encode() + b"\n")
                os.fsync(fd)
                self._write_head(entry["seq"], entry["hash"])
            except OSError as exc:
                with contextlib.suppress(OSError):  # shrinking a file needs no free space
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                raise _unwritten(self.path, exc, "the entry was not written") from None
        finally:
            os.close(fd)

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
            self._cut_torn()
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
            self._cut_torn()
            lines = self._lines()
            entries = [self._parse(line, i + 1) for i, line in enumerate(lines)]
            erased, marker = erase(entries, user_id, at)
            if marker is None:
                return 0
            # The rewritten log, its erasure entry included, and its head are both written out in
            # full before either is renamed into place: a disk that fills up leaves the log as it was.
            body = b"".join(canonical(entry).encode() + b"\n" for entry in [*entries, marker])
            prepared: list[Path] = []
            try:
                prepared.append(self._prepared(self.path, body))
                head = self._head_line(marker["seq"], marker["hash"])
                prepared.append(self._prepared(self.head_path, head))
            except OSError as exc:
                for tmp in prepared:
                    tmp.unlink(missing_ok=True)
                raise _unwritten(self.path, exc, "nothing was erased from it") from None
            os.replace(prepared[0], self.path)
            os.replace(prepared[1], self.head_path)
            fsync_dir(self.root)
        return len(erased)

    # -- reading ----------------------------------------------------------------------------------

    def _thread_entries(self, thread_id: str | None) -> list[dict[str, Any]]:
        found = []
        for number, line in enumerate(self._lines(), start=1):
            entry = self._parse(line, number)
            if thread_id is None or entry.get("thread_id") == thread_id:
                found.append(entry)
        return found

    def verify(self) -> Verification:
        """The chain's check, and then a part-written entry at the end, which the next write cuts."""
        found = super().verify()
        _, torn = self._read()
        if found.problem is None and torn:
            problem = (
                f"the log ends in part of an entry ({len(torn)} bytes) that a write cut short (a full "
                "disk, or a kill); it was never recorded, and the next entry written sets it aside"
            )
            return Verification(found.entries, found.erased, problem, found.entries + 1)
        return found

    def _chain(self) -> tuple[list[tuple[int, bytes]], dict[str, Any] | None]:
        # Under the append lock, so that the log and its head read as one, never between an entry and
        # its head; a log in a place this process cannot write to (no lock file) reads as it stands.
        # No directory yet is an empty log, as of that look: reading the files after it, unlocked,
        # could meet a first writer between its entry and its head.
        if not self.root.exists():
            return [], None
        with contextlib.ExitStack() as held:
            if self.root.is_dir() and not self._held:
                with contextlib.suppress(OSError):
                    held.enter_context(exclusive_lock(self.root / ".audit.lock"))
            return list(enumerate(self._lines(), start=1)), self._head()

    def _head(self) -> dict[str, Any] | None:
        try:
            head = json.loads(self.head_path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return head if isinstance(head, dict) else {}


def _unwritten(path: Path, exc: OSError, outcome: str) -> UserError:
    return UserError(f"cannot write the audit log {path}: {exc.strerror or exc}; {outcome}")
