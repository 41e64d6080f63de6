"""The audit log: every decision and publication, appended to a hash-chained file in the data
directory (`audit/audit.jsonl`), kept apart from the checkpoints so that `prune` leaves it and an
edit of the database does not reach it.

Each line is one entry. Its `hash` covers every field but the personal ones (who decided, whom the
analysis was for, the note), which sit in `personal` and enter the chain through their own digest,
`personal_hash`. So `forget --user` can replace a person's content with an erasure marker, record
the erasure as an entry of its own, and the chain still verifies; an edit of any other byte, a
missing entry or two entries swapped break it at the first entry that no longer matches. The last
entry's number and hash are also kept in `audit.head`, so entries cut from the end are noticed.

Appends from any number of processes are serialised by an exclusive lock on `.audit.lock`.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import hashlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.files import FILE_MODE, fsync_dir, private_dir
from market_analyst.ports import AuditEvent

GENESIS = "0" * 64
PERSONAL_FIELDS = ("actor", "requester", "note")
# The fields of an entry, in the order `audit export --format csv` writes them.
CSV_FIELDS = (
    "seq",
    "at",
    "action",
    "thread_id",
    "draft_id",
    "content_hash",
    "revision",
    "actor",
    "verified",
    "door",
    "requester",
    "note",
    "archive_key",
    "erased",
    "event_id",
    "prev",
    "hash",
)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def entry_hash(entry: dict[str, Any]) -> str:
    """The hash an entry's `hash` must equal: everything but the hash itself and the personal content
    (which the chain holds as `personal_hash`)."""
    return _digest({k: v for k, v in entry.items() if k not in ("hash", "personal")})


@dataclass(frozen=True)
class Verification:
    """What `audit verify` found: how many entries, and the first that does not match (None: none)."""

    entries: int
    erased: int
    problem: str | None = None
    bad_seq: int | None = None


class AuditLog:
    """The hash-chained audit log in `root` (the data directory's `audit/`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "audit.jsonl"
        self.head_path = root / "audit.head"

    # -- the file ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.root, "the audit log")
        try:
            fd = os.open(self.root / ".audit.lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise UserError(f"cannot open the audit log in {self.root}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

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
            os.write(fd, _canonical({"seq": seq, "hash": digest}) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.head_path)

    def _append_line(self, entry: dict[str, Any]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            os.write(fd, _canonical(entry) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        self._write_head(entry["seq"], entry["hash"])

    @staticmethod
    def _parse(line: bytes, number: int) -> dict[str, Any]:
        try:
            entry = json.loads(line)
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
            erased = erase_personal(entries, user_id)
            if not erased:
                return 0
            body = b"".join(_canonical(entry) + b"\n" for entry in entries)
            tmp = self.path.with_name(f".audit.jsonl.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            try:
                os.write(fd, body)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            fsync_dir(self.root)
            self._append_line(erasure_entry(entries[-1], erased, at))
        return len(erased)

    # -- reading ----------------------------------------------------------------------------------

    def entries(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Every entry in order (only `thread_id`'s when given), personal content inlined."""
        found = []
        for number, line in enumerate(self._lines(), start=1):
            entry = self._parse(line, number)
            if thread_id is not None and entry.get("thread_id") != thread_id:
                continue
            found.append(flatten(entry))
        return found

    def stored(self) -> list[dict[str, Any]]:
        """Every entry as stored (personal content apart), in order: what a copy carries over."""
        return [self._parse(line, number) for number, line in enumerate(self._lines(), start=1)]

    def verify(self) -> Verification:
        """Recompute the chain: each entry's number, link, hash and personal digest, every erasure
        accounted for by an erasure entry, and the head. Names the first entry that does not match."""
        return verify_chain(self._lines(), self._head(), "the log's head record (audit.head) is missing")

    def _head(self) -> dict[str, Any] | None:
        try:
            head = json.loads(self.head_path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return head if isinstance(head, dict) else {}

    def export(self, fmt: str) -> str:
        """The whole log as JSON lines (the stored entries, as they are) or CSV (one row an entry)."""
        return export_entries(self._lines(), self.entries() if fmt != "jsonl" else [], fmt)


def flatten(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as a person reads it: the personal content beside the other fields, `erased` marked."""
    personal = entry.get("personal") or {}
    flat = {k: v for k, v in entry.items() if k not in ("personal", "personal_hash")}
    erased = personal.get("erased") is True
    for name in PERSONAL_FIELDS:
        flat[name] = None if erased else personal.get(name)
    flat["erased"] = erased
    return flat


def verify_chain(lines: list[bytes], head: dict[str, Any] | None, no_head: str) -> Verification:
    """Recompute the chain of stored entries `lines` against `head` (the last entry's number and hash,
    recorded apart; None when there is none, which `no_head` names): what `audit verify` shows."""
    previous = GENESIS
    erased_markers: set[int] = set()
    erased_claimed: set[int] = set()
    for index, line in enumerate(lines):
        expected_seq = index + 1
        try:
            entry = json.loads(line)
            assert isinstance(entry, dict)
        except (ValueError, AssertionError):
            return Verification(index, 0, f"entry {expected_seq} is not valid JSON", expected_seq)
        seq = entry.get("seq")
        if seq != expected_seq:
            later = (f'"seq":{expected_seq},'.encode() in rest for rest in lines[index + 1 :])
            what = (
                f"entry {expected_seq} is out of order (found entry {seq} in its place)"
                if any(later)
                else f"entry {expected_seq} is missing (found entry {seq} in its place)"
            )
            return Verification(index, 0, what, expected_seq)
        if entry.get("prev") != previous:
            return Verification(
                index, 0, f"entry {seq} does not follow entry {seq - 1} (its link does not match)", seq
            )
        if entry.get("hash") != entry_hash(entry):
            return Verification(index, 0, f"entry {seq} was changed (its hash does not match)", seq)
        personal = entry.get("personal")
        if personal == {"erased": True}:
            erased_markers.add(seq)
        elif _digest(personal) != entry.get("personal_hash"):
            return Verification(
                index, 0, f"entry {seq} was changed (its personal content does not match)", seq
            )
        if entry.get("action") == "erased":
            erased_claimed.update(int(s) for s in entry.get("erased_seqs") or [])
        previous = str(entry["hash"])
    if head is not None and (head.get("seq") != len(lines) or head.get("hash") != previous):
        return Verification(
            len(lines),
            len(erased_markers),
            f"the log ends at entry {len(lines)}, but entry {head.get('seq')} was the last one written: "
            "entries were removed from its end",
            len(lines) + 1,
        )
    if head is None and lines:
        return Verification(len(lines), len(erased_markers), no_head)
    unaccounted = sorted(erased_markers - erased_claimed)
    if unaccounted:
        first = unaccounted[0]
        return Verification(
            len(lines), 0, f"entry {first} was erased without an erasure entry recording it", first
        )
    return Verification(len(lines), len(erased_markers))


def erase_personal(entries: list[dict[str, Any]], user_id: str) -> list[int]:
    """Replace, in place, the personal content of every entry that names `user_id` (as the one who
    decided or the one it was for) with an erasure marker; the numbers of the entries changed."""
    erased: list[int] = []
    for entry in entries:
        personal = entry.get("personal") or {}
        if personal.get("erased"):
            continue
        names = {personal.get("requester"), *(str(personal.get("actor") or "").split(", "))}
        if user_id in names:
            entry["personal"] = {"erased": True}
            erased.append(int(entry["seq"]))
    return erased


def erasure_entry(last: dict[str, Any], erased: list[int], at: str) -> dict[str, Any]:
    """The entry that records an erasure of entries `erased`, following `last` in the chain."""
    personal = {"actor": None, "requester": None, "note": ""}
    marker = {
        "seq": int(last["seq"]) + 1,
        "event_id": f"erasure:{_digest([at, erased])[:32]}",
        "action": "erased",
        "at": at,
        "erased_seqs": erased,
        "personal": personal,
        "personal_hash": _digest(personal),
        "prev": str(last["hash"]),
    }
    marker["hash"] = entry_hash(marker)
    return marker


def next_entry(event: AuditEvent, last: dict[str, Any] | None) -> dict[str, Any]:
    """`event` as the entry that follows `last` (None: the first entry), its hash computed."""
    fields = asdict(event)
    personal = {name: fields.pop(name) for name in PERSONAL_FIELDS}
    entry = {
        "seq": (int(last["seq"]) + 1) if last else 1,
        **fields,
        "personal": personal,
        "personal_hash": _digest(personal),
        "prev": str(last["hash"]) if last else GENESIS,
    }
    entry["hash"] = entry_hash(entry)
    return entry


def canonical(entry: dict[str, Any]) -> str:
    """An entry as stored: canonical JSON, one line."""
    return _canonical(entry).decode()


def export_entries(lines: list[bytes], entries: list[dict[str, Any]], fmt: str) -> str:
    """The stored `lines` as JSON lines, or their flattened `entries` as CSV (one row an entry)."""
    if fmt == "jsonl":
        return "".join(line.decode() + "\n" for line in lines)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for entry in entries:
        writer.writerow({k: ("" if entry.get(k) is None else entry.get(k)) for k in CSV_FIELDS})
    return out.getvalue()
