"""Due times as pure functions of the request time, the settings and the clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from market_analyst.deadlines import Deadlines, schedule

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)


def test_reminders_escalation_and_expiry_fall_due_in_time_order():
    times = schedule(
        T0, Deadlines(due=2 * S, remind_every=S, max_reminders=3, escalate_to=("dora",), expire_after=6 * S)
    )
    assert times.reminders == (T0 + S, T0 + 2 * S, T0 + 3 * S)
    assert [k for k, _, _ in times.falling_due(T0 + 2 * S)] == ["reminded", "reminded", "escalated"]
    assert [(k, n) for k, n, _ in times.falling_due(T0 + 10 * S)] == [
        ("reminded", 1),
        ("reminded", 2),
        ("escalated", 0),
        ("reminded", 3),
        ("expired", 0),
    ]
    assert times.falling_due(T0 + S / 2) == []


def test_no_reminder_or_escalation_at_or_after_the_expiry():
    times = schedule(
        T0, Deadlines(due=5 * S, remind_every=2 * S, max_reminders=10, escalate_to=("x",), expire_after=4 * S)
    )
    assert times.reminders == (T0 + 2 * S,) and times.escalate_at is None


def test_nothing_set_is_nothing_due():
    times = schedule(T0, Deadlines())
    assert times.due_at is None and times.expires_at is None and times.falling_due(T0 + 1000 * S) == []


def test_escalation_needs_someone_to_escalate_to():
    assert schedule(T0, Deadlines(due=S)).escalate_at is None
