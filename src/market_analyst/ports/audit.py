"""The audit port: the log of decisions and publications, kept apart from the checkpoints: what a
node appends (`AuditWriter`), and the whole hash-chained log as the commands read, verify and export
it (`AuditRecords`), whichever backend holds it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class AuditEvent:
    """One decision or publication, as the audit log records it. `event_id` names the event itself
    (a node re-run after a crash appends the same event, which the log keeps once)."""

    event_id: str
    action: str  # approved, rejected, revised, published
    at: str  # UTC ISO time
    thread_id: str | None = None
    draft_id: str | None = None
    content_hash: str | None = None
    revision: int | None = None
    actor: str | None = None  # who decided (personal: erased by `forget`)
    verified: bool = False
    door: str = ""
    requester: str | None = None  # whom the analysis was for (personal)
    note: str = ""  # the note, reason or feedback (personal)
    archive_key: str | None = None


class AuditWriter(Protocol):
    """Appends to the audit log, kept apart from the checkpoints; an event seen before is kept once."""

    def append(self, event: AuditEvent) -> dict[str, Any]:
        """Append `event` (unless its `event_id` is in the log already) and return its entry."""
        ...


@dataclass(frozen=True)
class Verification:
    """What `audit verify` found: how many entries, and the first that does not match (None: none)."""

    entries: int
    erased: int
    problem: str | None = None
    bad_seq: int | None = None


class AuditRecords(Protocol):
    """The hash-chained audit log: appended by any number of writers, read, verified, exported."""

    def append(self, event: AuditEvent) -> dict[str, Any]: ...
    def erase_user(self, user_id: str, at: str) -> int: ...
    def entries(self, thread_id: str | None = None) -> list[dict[str, Any]]: ...
    def verify(self) -> Verification: ...
    def export(self, fmt: str) -> str: ...
