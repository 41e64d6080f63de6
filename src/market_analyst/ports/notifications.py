"""Events: what the workflow tells people about a decision it waits for or has made, and the outbox it
writes them to (delivered by a job queue, `workflow/notifications.py`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal, Protocol

EventKind = Literal[
    "requested", "counted", "reminded", "escalated", "expired", "published", "rejected", "revised"
]


@dataclass(frozen=True)
class Event:
    """One event, named by what caused it: the same cause, met again after a crash, is the same event.
    It carries no profile notes, no memories and no decision notes: only what a receiver needs to
    find the thread and know what happened."""

    event_id: str
    kind: EventKind
    at: str  # UTC ISO time of the cause
    thread_id: str
    ticker: str | None = None
    draft_id: str | None = None
    content_hash: str | None = None
    revision: int | None = None
    by: str | None = None  # who acted: the requester for `requested`, the approvers for `published`
    requester: str | None = None  # whom the analysis was for (told of its outcome)
    verified: bool | None = None  # whether the door authenticated `by` (the CLI's names are not)
    door: str | None = None  # the door the decision came through
    approvals: str | None = None  # for `counted`: "1 of 2"
    to: tuple[str, ...] = ()  # for `escalated`: the approvers added to those told
    due_at: str | None = None  # when the decision is due (requested, reminded, escalated)
    expires_at: str | None = None  # when the draft expires, if it does


def event_id_for(kind: str, *cause: str) -> str:
    """An event's ID, derived from its kind and what caused it."""
    return f"evt_{kind}_" + hashlib.sha256("|".join((kind, *cause)).encode()).hexdigest()[:24]


class EventOutbox(Protocol):
    """Where the nodes write events, beside what caused them; an event seen before is kept once."""

    def put(self, event: Event) -> None:
        """Keep `event` (unless its `event_id` is kept already) until it is delivered."""
        ...
