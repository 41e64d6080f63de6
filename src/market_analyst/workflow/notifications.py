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
    "no notifications are configured: set MA_WEBHOOK_URL and MA_WEBHOOK_SECRET (docs/notifications.md)"
)


def _configured(settings: Settings) -> None:
    if not settings.notifies:
        raise UserError(NOT_CONFIGURED)


def run_worker(settings: Settings, started: Callable[[str], None]) -> None:
    """Deliver events until SIGINT or SIGTERM: one worker of the queue every host shares. `started`
    hears where the queue is, once the settings are found to configure a receiver."""
    _configured(settings)
    queue = open_queue(settings)
    started(queue.server.describe("records database"))
    asyncio.run(queue.work(signals=True))


def background_worker(settings: Settings) -> Any | None:
    """A worker on a thread of its own, started, for `serve` (None when nothing is configured)."""
    if not settings.notifies:
        return None
    from market_analyst.deps import background_worker as start

    return start(open_queue(settings))


def deliveries(settings: Settings, *, dead: bool, thread_id: str | None) -> list[dict[str, Any]]:
    """Every delivery (of the dead ones; of one thread), oldest event first."""
    return [asdict(d) for d in open_events(settings).deliveries(dead=dead, thread_id=thread_id)]


def retry(settings: Settings, event_id: str | None) -> int:
    """Send dead deliveries (of one event, or all) once more; how many were queued."""
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
