"""Due times of a decision, counted from its request (the draft's `drafted_at`): when it is due, when
its approvers are reminded, when it is escalated, and when it expires. Pure functions of the request
time, the settings and the clock, so every process (a worker, a door, `notifications preview`)
computes the same schedule, and a test moves the clock instead of waiting."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Deadlines:
    """The settings: `MA_DECISION_DUE`, `MA_REMIND_EVERY` (at most `MA_MAX_REMINDERS`),
    `MA_ESCALATE_TO` and `MA_EXPIRE_AFTER`; None is no such time."""

    due: timedelta | None = None
    remind_every: timedelta | None = None
    max_reminders: int = 3
    escalate_to: tuple[str, ...] = ()
    expire_after: timedelta | None = None


@dataclass(frozen=True)
class Schedule:
    """One request's times: reminders fall before the expiry only, and escalation at the due time
    when someone is named to escalate to."""

    requested_at: datetime
    due_at: datetime | None
    reminders: tuple[datetime, ...] = field(default_factory=tuple)
    escalate_at: datetime | None = None
    expires_at: datetime | None = None

    def falling_due(self, now: datetime) -> list[tuple[str, int, datetime]]:
        """What has fallen due by `now`, in time order: `("reminded", n, at)`, `("escalated", 0, at)`,
        `("expired", 0, at)`. Once expired, nothing else falls due."""
        due: list[tuple[str, int, datetime]] = [
            ("reminded", n, at) for n, at in enumerate(self.reminders, start=1) if at <= now
        ]
        if self.escalate_at is not None and self.escalate_at <= now:
            due.append(("escalated", 0, self.escalate_at))
        if self.expires_at is not None and self.expires_at <= now:
            due.append(("expired", 0, self.expires_at))
        return sorted(due, key=lambda item: (item[2], item[0] != "reminded"))


def schedule(requested_at: datetime, deadlines: Deadlines) -> Schedule:
    """The times of a request made at `requested_at` under `deadlines`."""
    due_at = requested_at + deadlines.due if deadlines.due is not None else None
    expires_at = requested_at + deadlines.expire_after if deadlines.expire_after is not None else None
    reminders: list[datetime] = []
    if deadlines.remind_every is not None:
        for n in range(1, deadlines.max_reminders + 1):
            at = requested_at + n * deadlines.remind_every
            if expires_at is not None and at >= expires_at:
                break
            reminders.append(at)
    escalate_at = due_at if deadlines.escalate_to and due_at is not None else None
    if escalate_at is not None and expires_at is not None and escalate_at >= expires_at:
        escalate_at = None
    return Schedule(requested_at, due_at, tuple(reminders), escalate_at, expires_at)


def iso(at: datetime | None) -> str | None:
    return at.isoformat(timespec="seconds") if at is not None else None
