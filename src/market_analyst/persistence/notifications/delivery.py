"""Delivery on procrastinate, the PostgreSQL job queue: in the records database with its outbox, so
workers on every host that reach it share one queue.

Two tasks. `ma.relay` runs every second (a periodic task: deferred once per tick whatever the number of
workers): it gives each new event its deliveries, queues a `ma.deliver` job for every pending
delivery without one (new, or whose job was lost), and puts back in the queue the jobs of a worker
that stopped sending heartbeats (killed mid-delivery). `ma.deliver` sends one event to one receiver
under the delivery's row lock; the jobs of one thread and receiver share a queue lock, so they go one
at a time and in order. A failure is retried after a wait that doubles each time (from
`MA_WEBHOOK_BACKOFF`); the last of `MA_WEBHOOK_ATTEMPTS` leaves the delivery dead, for `notifications
list --dead` and `notifications retry`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from procrastinate import App, BaseRetryStrategy, JobContext, PsycopgConnector, RetryDecision
from procrastinate.exceptions import AlreadyEnqueued
from procrastinate.schema import SchemaManager

from market_analyst.persistence.notifications.store import NotificationStore, job_lock, queueing_lock
from market_analyst.persistence.notifications.webhook import DeliveryFailed
from market_analyst.persistence.postgres.records import RecordsTables
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.ports import Event

log = logging.getLogger("market_analyst.notifications")

QUEUE = "ma_notifications"
HEARTBEAT_SECONDS = 1.0
# A worker silent this long is taken for dead, and the jobs it was working on are queued again.
STALLED_SECONDS = 5.0
POLL_SECONDS = 0.5  # how often a worker looks for retries that fell due (new jobs wake it at once)


class RetryLater(Exception):
    """A delivery failed and is tried again after `wait` seconds."""

    def __init__(self, why: str, wait: float) -> None:
        super().__init__(why)
        self.wait = wait


class _Backoff(BaseRetryStrategy):
    """Retries a failed delivery after the wait it names; anything else (the records database away)
    after the first wait."""

    def __init__(self, first: float) -> None:
        self.first = first

    def get_retry_decision(self, *, exception: BaseException, job: Any) -> RetryDecision | None:
        wait = exception.wait if isinstance(exception, RetryLater) else self.first
        return RetryDecision(retry_at=datetime.now(UTC) + timedelta(seconds=wait))


@dataclass(frozen=True)
class Receiver:
    """Where events go: a name (the delivery rows' `receiver`) and how one event is sent there."""

    name: str
    send: Callable[[Event], None]


class Queue:
    """The job queue of one records database: defers and runs the delivery of events to `receivers`."""

    def __init__(
        self,
        server: PostgresServer,
        store: NotificationStore,
        receivers: list[Receiver],
        *,
        attempts: int,
        backoff: float,
    ) -> None:
        self.server, self.store, self.attempts, self.backoff = server, store, attempts, backoff
        self.receivers = {r.name: r for r in receivers}

    @functools.cached_property
    def app(self) -> App:
        """The queue's procrastinate app, its tables made in the records database first (once, under
        a lock, whatever the number of processes starting at once)."""
        tables = RecordsTables(self.server, "queue", (SchemaManager.get_schema(),))
        with tables.connect():
            pass
        app = App(connector=PsycopgConnector(conninfo=self.server.uri()))
        self._register(app)
        return app

    def wait_for(self, attempts_made: int) -> float:
        return self.backoff * (2**attempts_made)

    def _register(self, app: App) -> None:
        @app.periodic(cron="* * * * * *", periodic_id="relay")
        @app.task(name="ma.relay", queue=QUEUE, pass_context=True)
        async def relay(context: JobContext, timestamp: int) -> None:
            await self.relay()

        @app.task(name="ma.deliver", queue=QUEUE, retry=_Backoff(self.backoff))
        async def deliver(event_id: str, receiver: str) -> None:
            await asyncio.to_thread(self.deliver_once, event_id, receiver)

        self._deliver = deliver

    async def relay(self) -> None:
        """One pass of the relay: new events into deliveries, deliveries into jobs, stalled jobs back."""
        await asyncio.to_thread(self.store.relay, sorted(self.receivers))
        for event_id, receiver, thread_id in await asyncio.to_thread(self.store.without_job):
            await self.defer(event_id, receiver, thread_id)
        for job in await self.app.job_manager.get_stalled_jobs(
            queue=QUEUE, seconds_since_heartbeat=STALLED_SECONDS
        ):
            log.warning("job %s of a stopped worker is queued again", job.id)
            await self.app.job_manager.retry_job(job)

    async def defer(self, event_id: str, receiver: str, thread_id: str) -> None:
        try:
            await self._deliver.configure(
                lock=job_lock(thread_id, receiver), queueing_lock=queueing_lock(event_id, receiver)
            ).defer_async(event_id=event_id, receiver=receiver)
        except AlreadyEnqueued:
            pass

    def deliver_once(self, event_id: str, receiver: str) -> None:
        """Send one event to one receiver, unless it was delivered already; `RetryLater` when it
        failed and attempts are left, dead-lettered when none are."""
        target = self.receivers.get(receiver)
        with self.store.delivering(event_id, receiver) as claim:
            if claim is None:
                return
            if target is None:
                claim.mark("dead", f"no receiver {receiver!r} is configured any more")
                return
            try:
                target.send(claim.event)
            except DeliveryFailed as exc:
                if claim.attempts + 1 >= self.attempts:
                    claim.mark("dead", str(exc))
                    log.warning(
                        "event %s to %s: dead after %d attempts: %s", event_id, receiver, self.attempts, exc
                    )
                    return
                claim.mark("pending", str(exc))
                failed = RetryLater(str(exc), self.wait_for(claim.attempts))
            else:
                claim.mark("delivered")
                log.info(
                    "delivered %s (%s, thread %s) to %s",
                    event_id,
                    claim.event.kind,
                    claim.event.thread_id,
                    receiver,
                )
                return
        raise failed

    # -- for the command line ---------------------------------------------------------------------

    def retry(self, event_id: str | None) -> int:
        """Make dead deliveries (of one event, or all) pending again and queue them; how many."""
        revived = self.store.revive(event_id)

        async def queue_them() -> None:
            async with self.app.open_async():
                for event_id_, receiver, thread_id in revived:
                    await self.defer(event_id_, receiver, thread_id)

        if revived:
            asyncio.run(queue_them())
        return len(revived)

    async def work(self, *, signals: bool, concurrency: int = 4) -> None:
        """Run a worker until cancelled (or, with `signals`, until SIGINT/SIGTERM)."""
        async with self.app.open_async():
            await self.app.run_worker_async(
                queues=[QUEUE],
                concurrency=concurrency,
                delete_jobs="successful",
                fetch_job_polling_interval=POLL_SECONDS,
                update_heartbeat_interval=HEARTBEAT_SECONDS,
                stalled_worker_timeout=STALLED_SECONDS,
                install_signal_handlers=signals,
            )


class BackgroundWorker:
    """A queue worker on a thread of its own, for `serve`: started with the server, stopped with it."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, name="notifications-worker", daemon=True)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._task = self._loop.create_task(self.queue.work(signals=False))
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("the notifications worker stopped")
        finally:
            self._loop.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout)
