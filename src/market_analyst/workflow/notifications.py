"""What the `worker` and `notifications` commands do: run the queue that delivers events, show
deliveries, and send dead ones again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from market_analyst.deps import open_events, open_queue
from market_analyst.errors import UserError
from market_analyst.settings import Settings

log = logging.getLogger("market_analyst.notifications")
NOT_CONFIGURED = (
    "no notifications are configured: set MA_WEBHOOK_URL and MA_WEBHOOK_SECRET, or a due time "
    "(MA_DECISION_DUE, MA_REMIND_EVERY, MA_EXPIRE_AFTER; docs/notifications.md)"
)
DEADLINE = "deadline"  # who records an expiry, in the audit log


def _configured(settings: Settings) -> None:
    if not settings.notifies:
        raise UserError(NOT_CONFIGURED)


def expire_draft(settings: Settings, thread_id: str, draft_id: str) -> bool | None:
    """Record that the draft's expiry has passed, through the gate (its audit entry and its event):
    True once it is recorded (now or before); False when nothing there can expire any more (the
    thread is gone or finished, or on another draft); None when not now (the thread is busy, between
    steps, or its own request says the expiry is later): asked again at the next tick."""
    from market_analyst.decisions import Identity
    from market_analyst.errors import ThreadBusy
    from market_analyst.workflow.inbox import find_thread
    from market_analyst.workflow.runs import decide

    view = find_thread(settings, thread_id)
    if view is None or view.status in ("published", "rejected", "ended"):
        return False
    if (view.request or {}).get("draft_id") not in (None, draft_id):
        return False
    if view.status == "expired":
        return True
    if view.status != "awaiting_approval":
        return None
    try:
        decide(
            settings,
            thread_id,
            action="expire",
            identity=Identity(DEADLINE, verified=True, door="deadline"),
            draft_id=draft_id,
            memories="later",
        )
    except ThreadBusy:
        return None
    except UserError as exc:
        log.info("thread %s: no expiry recorded now (%s)", thread_id, exc)
        return None
    log.info("thread %s: draft %s expired", thread_id, draft_id)
    return True


def run_worker(settings: Settings, started: Callable[[str], None]) -> None:
    """Deliver events and keep due times until SIGINT or SIGTERM: one worker of the queue every host
    shares. `started` hears where the queue is, once the settings are found to need one."""
    _configured(settings)
    queue = open_queue(settings, lambda thread, draft: expire_draft(settings, thread, draft))
    started(queue.server.describe("records database"))
    asyncio.run(queue.work(signals=True))


def background_worker(settings: Settings) -> Any | None:
    """A worker on a thread of its own, started, for `serve` (None when nothing is configured)."""
    if not settings.notifies:
        return None
    from market_analyst.deps import background_worker as start

    return start(open_queue(settings, lambda thread, draft: expire_draft(settings, thread, draft)))


def deliveries(settings: Settings, *, dead: bool, thread_id: str | None) -> list[dict[str, Any]]:
    """Every delivery (of the dead ones; of one thread), oldest event first."""
    return [asdict(d) for d in open_events(settings).deliveries(dead=dead, thread_id=thread_id)]


def retry(settings: Settings, event_id: str | None) -> int:
    """Make dead deliveries (of one event, or all) pending again, for a worker to send once more; how
    many."""
    _configured(settings)
    store = open_events(settings)
    if event_id is not None and not store.known(event_id):
        raise UserError(f"no event {event_id!r}: 'market-analyst notifications list' shows them")
    count = open_queue(settings).retry(event_id)
    if event_id is not None and count == 0:
        raise UserError(
            f"event {event_id} has no dead delivery: only a delivery that ran out of attempts is sent again"
        )
    return count


def preview(settings: Settings, thread_id: str) -> dict[str, Any]:
    """A thread's due times under the current settings, and what has fallen due by now: how an
    operator checks their settings against a real thread without waiting."""
    from datetime import datetime

    from market_analyst.deadlines import iso, schedule
    from market_analyst.deps import deadlines
    from market_analyst.redaction import redact_url
    from market_analyst.workflow.runs import thread_status

    view = thread_status(settings, thread_id)
    request = view.request or {}
    if view.status not in ("awaiting_approval", "expired") or not request.get("drafted_at"):
        raise UserError(
            f"thread {thread_id} is {view.status.replace('_', ' ')}: only a draft waiting for a decision "
            "has due times"
            + ("" if request.get("drafted_at") or not request else " (its draft's time was not recorded)")
        )
    rules = deadlines(settings)
    times = schedule(datetime.fromisoformat(request["drafted_at"]), rules)
    now = settings.now()
    return {
        "thread_id": thread_id,
        "draft_id": request.get("draft_id"),
        "status": view.status,
        "requested_at": request["drafted_at"],
        "due_at": iso(times.due_at),
        "reminders": [iso(at) for at in times.reminders],
        "escalate_at": iso(times.escalate_at),
        "escalate_to": list(rules.escalate_to),
        "expires_at": iso(times.expires_at),
        "now": iso(now),
        "fallen_due": [
            f"{kind}{f' {n}' if n else ''} at {iso(at)}" for kind, n, at in times.falling_due(now)
        ],
        "webhook": redact_url(settings.webhook_url) if settings.webhook_url else None,
    }
