"""The audit log's chain, which both logs keep the same way: the file in the data directory
(`files.py`) and the records database's table (`postgres.py`). The log holds every decision and
publication, kept apart from the checkpoints so that `prune` leaves it and an edit of the checkpoint
database does not reach it.

Each entry's `hash` covers every field but the personal ones (who decided, whom the
analysis was for, the note), which sit in `personal` and enter the chain through their own digest,
`personal_hash`. So `forget --user` can replace a person's content with an erasure marker, record
the erasure as an entry of its own, and the chain still verifies; an edit of any other byte, a
missing entry or two entries swapped break it at the first entry that no longer matches. The last
entry's number and hash are also kept apart (the head), so entries cut from the end are noticed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from abc import ABC, abstractmethod
from dataclasses import asdict
from typing import Any

from market_analyst.errors import UserError
from market_analyst.ports import AuditEvent, Verification

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


def flatten(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as a person reads it: the personal content beside the other fields, `erased` marked."""
    personal = entry.get("personal") or {}
    flat = {k: v for k, v in entry.items() if k not in ("personal", "personal_hash")}
    erased = personal.get("erased") is True
    for name in PERSONAL_FIELDS:
        flat[name] = None if erased else personal.get(name)
    flat["erased"] = erased
    return flat


def verify_chain(
    lines: list[bytes], head: dict[str, Any] | None, no_head: str, *, head_may_lag: bool = False
) -> Verification:
    """Recompute the chain of stored entries `lines` against `head` (the last entry's number and hash,
    recorded apart; None when there is none, which `no_head` names): what `audit verify` shows.

    `head_may_lag`: the head is written after its entry (the file log: two files), so a kill between
    the two leaves a whole, chained last entry that the head does not name yet; the head naming the
    entry before it is then that append, which the next write completes, not a log altered."""
    previous = GENESIS
    hashes: list[str] = []
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
        hashes.append(previous)
    cut_append = head_may_lag and (
        (head is None and len(lines) == 1)  # the first entry, its head not written yet
        or (
            head is not None
            and len(lines) >= 2
            and head.get("seq") == len(lines) - 1
            and head.get("hash") == hashes[-2]
        )
    )
    differs = head is not None and (head.get("seq") != len(lines) or head.get("hash") != previous)
    if head is not None and differs and not cut_append:
        written = head.get("seq")
        if isinstance(written, int) and written < len(lines):
            what = (
                f"the log ends at entry {len(lines)}, but its head names entry {written} as the last one "
                "written: entries were added to its end outside the log's own writes"
            )
        else:
            what = (
                f"the log ends at entry {len(lines)}, but entry {written} was the last one written: "
                "entries were removed from its end"
            )
        return Verification(len(lines), len(erased_markers), what, len(lines) + 1)
    if head is None and lines and not cut_append:
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


def erase(entries: list[dict[str, Any]], user_id: str, at: str) -> tuple[list[int], dict[str, Any] | None]:
    """Erase `user_id`'s personal content in `entries`, in place (`erase_personal`), and make the entry
    that records the erasure after the last of them: the numbers erased and that entry (None when no
    entry named the user)."""
    erased = erase_personal(entries, user_id)
    return erased, (erasure_entry(entries[-1], erased, at) if erased else None)


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


class NotCopied(UserError):
    """An entry of another log that this one cannot take as it is; the message names it. `held`: this
    log holds the same event (with other content), so the two logs share that history."""

    def __init__(self, message: str, *, held: bool = False) -> None:
        super().__init__(message)
        self.held = held


# The fields that place an entry in its chain, which a carried copy gets anew.
_PLACE = ("seq", "prev", "hash", "copied_from")


def same_event(held: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether `held`, an entry of this log, is `entry` of another log: stored as it was, or carried
    (`copied_from` names it), or with its personal content erased here since."""
    rest = [{k: v for k, v in e.items() if k not in (*_PLACE, "personal")} for e in (held, entry)]
    if rest[0] != rest[1]:
        return False
    if "copied_from" in held:
        placed = held["copied_from"] == {"seq": entry.get("seq"), "hash": entry.get("hash")}
    else:
        placed = all(held.get(k) == entry.get(k) for k in ("seq", "prev", "hash"))
    return placed and held.get("personal") in (entry.get("personal"), {"erased": True})


def carried_entry(entry: dict[str, Any], last: dict[str, Any] | None) -> dict[str, Any]:
    """`entry` of another log as the entry that follows `last` here: its content as it was, and
    `copied_from` naming its number and hash there."""
    carried = {
        "seq": (int(last["seq"]) + 1) if last else 1,
        **{k: v for k, v in entry.items() if k not in _PLACE},
        "copied_from": {"seq": entry.get("seq"), "hash": entry.get("hash")},
        "prev": str(last["hash"]) if last else GENESIS,
    }
    carried["hash"] = entry_hash(carried)
    return carried


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


class AuditChain(ABC):
    """What both logs do the same way over the entries they store: read them back with the personal
    content inlined, hand them over for a copy, verify the chain against the head, export it."""

    # What `verify` says when the log has entries but no head.
    NO_HEAD: str
    # Whether an entry and its head are written apart, so that a kill can land between them.
    HEAD_MAY_LAG = False

    @abstractmethod
    def _chain(self) -> tuple[list[tuple[int, bytes]], dict[str, Any] | None]:
        """Every stored entry, in order, with the number the log names it by, and the head (the last
        entry's number and hash as recorded apart; None when there is none)."""

    @abstractmethod
    def _thread_entries(self, thread_id: str | None) -> list[dict[str, Any]]:
        """The stored entries in order (only `thread_id`'s when given)."""

    @staticmethod
    @abstractmethod
    def _parse(stored: bytes | str, number: int) -> dict[str, Any]:
        """One stored entry, or `UserError` naming it by `number`."""

    def entries(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Every entry in order (only `thread_id`'s when given), personal content inlined."""
        return [flatten(entry) for entry in self._thread_entries(thread_id)]

    def stored(self) -> list[dict[str, Any]]:
        """Every entry as stored (personal content apart), in order: what a copy carries over."""
        rows, _ = self._chain()
        return [self._parse(line, number) for number, line in rows]

    def verify(self) -> Verification:
        """Recompute the chain: each entry's number, link, hash and personal digest, every erasure
        accounted for by an erasure entry, and the head. Names the first entry that does not match."""
        rows, head = self._chain()
        return verify_chain([line for _, line in rows], head, self.NO_HEAD, head_may_lag=self.HEAD_MAY_LAG)

    def export(self, fmt: str) -> str:
        """The whole log as JSON lines (the stored entries, as they are) or CSV (one row an entry)."""
        rows, _ = self._chain()
        entries = [] if fmt == "jsonl" else [flatten(self._parse(line, number)) for number, line in rows]
        return export_entries([line for _, line in rows], entries, fmt)
