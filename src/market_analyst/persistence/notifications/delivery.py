"""Delivery on procrastinate, the PostgreSQL job queue: in the records database with its outbox, so
workers on every host that reach it share one queue.

Two tasks. `ma.relay` runs every second (a periodic task, deferred once per tick whatever the number
of workers, one at a time and at most one waiting): it writes the reminders, escalations and
expiries that fell due, gives each new event its deliveries, queues a `ma.deliver` job for every
pending delivery without one (new, sent again by `notifications retry`, or whose job was lost), and
puts back in the queue the delivery jobs of a worker that stopped sending heartbeats (killed
mid-delivery). It alone queues deliveries, so their jobs are queued in the order the events were
written. `ma.deliver` sends one event to one receiver; the jobs of one thread and receiver share a
queue lock, so they go one at a time and in order. A failure is retried after a wait that doubles
each time (from `MA_WEBHOOK_BACKOFF`, at most an hour); the last of `MA_WEBHOOK_ATTEMPTS` leaves the
delivery dead, for `notifications list --dead` and `notifications retry`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from procrastinate import App, BaseRetryStrategy, JobContext, PsycopgConnector, RetryDecision
from procrastinate.exceptions import AlreadyEnqueued, ProcrastinateException
from procrastinate.jobs import Status
from procrastinate.schema import SchemaManager

from market_analyst.deadlines import Deadlines, iso, schedule
from market_analyst.persistence.notifications.store import NotificationStore, job_lock, queueing_lock
from market_analyst.persistence.notifications.webhook import DeliveryFailed
from market_analyst.persistence.postgres.records import RecordsTables
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.ports import Event, event_id_for

log = logging.getLogger("market_analyst.notifications")

QUEUE = "ma_notifications"
HEARTBEAT_SECONDS = 1.0
# A worker silent this long is taken for dead, and the jobs it was working on are queued again.
STALLED_SECONDS = 5.0
POLL_SECONDS = 0.5
MAX_WAIT_SECONDS = 3600.0  # the longest wait between two attempts
RELAY = "ma.relay"  # how often a worker looks for retries that fell due (new jobs wake it at once)


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


class Routes(Protocol):
    """Where events go: the receivers of each event (the delivery rows' `receiver`: `webhook`,
    `email:NAME`), and how one is sent to one of them (`DeliveryFailed` when it was not)."""

    def receivers(self, event: Event) -> list[str]: ...
    def send(self, receiver: str, event: Event) -> None: ...


class Queue:
    """The job queue of one records database: defers and runs the delivery of events along `routes`."""

    def __init__(
        self,
        server: PostgresServer,
        store: NotificationStore,
        routes: Routes,
        *,
        attempts: int,
        backoff: float,
        deadlines: Deadlines | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        expire: Callable[[str, str], bool | None] | None = None,
    ) -> None:
        self.server, self.store, self.attempts, self.backoff = server, store, attempts, backoff
        self.routes = routes
        self.deadlines, self.now, self.expire = deadlines, now, expire
        self._written: set[str] = set()  # reminders and escalations this process has written

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

    def _register(self, app: App) -> None:
        # One relay at a time, and at most one waiting: it alone queues deliveries, in written order.
        @app.periodic(cron="* * * * * *", periodic_id="relay")
        @app.task(name="ma.relay", queue=QUEUE, pass_context=True, lock=RELAY, queueing_lock=RELAY)
        async def relay(context: JobContext, timestamp: int) -> None:
            await self.relay()

        @app.task(name="ma.deliver", queue=QUEUE, retry=_Backoff(self.backoff))
        async def deliver(event_id: str, receiver: str) -> None:
            await asyncio.to_thread(self.deliver_once, event_id, receiver)

        self._deliver = deliver

    async def relay(self) -> None:
        """One pass of the relay: new events into deliveries, deliveries into jobs, stalled jobs back."""
        await asyncio.to_thread(self.keep_deadlines)
        await asyncio.to_thread(self.store.relay, self.routes.receivers)
        for event_id, receiver, thread_id in await asyncio.to_thread(self.store.without_job):
            await self.defer(event_id, receiver, thread_id)
        manager = self.app.job_manager
        for job in await manager.get_stalled_jobs(queue=QUEUE, seconds_since_heartbeat=STALLED_SECONDS):
            assert job.id is not None
            if job.task_name != "ma.deliver":  # a relay: the next tick does its work
                await manager.finish_job_by_id_async(job.id, status=Status.FAILED, delete_job=True)
                continue
            log.warning("delivery job %s of a stopped worker is queued again", job.id)
            try:
                await manager.retry_job(job)
            except ProcrastinateException as exc:  # queued again already (by a relay beside this one)
                log.warning("delivery job %s was not queued again: %s", job.id, exc)

    def keep_deadlines(self) -> None:
        """The reminders and escalations of open requests that fell due, as events (each named by its
        request and its number, so a tick that meets it again writes nothing new), and the expiry of
        each draft past it, recorded through the gate (which writes its own event)."""
        if self.deadlines is None:
            return
        now = self.now()
        for request in self.store.open_requests():
            assert request.draft_id is not None
            times = schedule(datetime.fromisoformat(request.at), self.deadlines)
            for kind, n, at in times.falling_due(now):
                if kind == "expired":
                    self._expire(request)
                    break
                event_id = event_id_for(kind, request.thread_id, request.draft_id, str(n))
                if event_id in self._written:  # written at an earlier tick: not asked again
                    continue
                self.store.put_while_open(
                    replace(
                        request,
                        event_id=event_id,
                        kind=kind,  # type: ignore[arg-type]
                        at=iso(at) or request.at,
                        by=None,
                        to=self.deadlines.escalate_to if kind == "escalated" else (),
                    )
                )
                self._written.add(event_id)

    def _expire(self, request: Event) -> None:
        if self.expire is None:
            return
        try:
            if self.expire(request.thread_id, request.draft_id or "") is False:
                self.store.close(request.event_id)  # nothing there can expire any more
        except Exception as exc:  # busy, or a store away: tried again at the next tick
            log.warning("the expiry of thread %s is not recorded yet: %s", request.thread_id, exc)

    async def defer(self, event_id: str, receiver: str, thread_id: str) -> None:
        try:
            await self._deliver.configure(
                lock=job_lock(thread_id, receiver), queueing_lock=queueing_lock(event_id, receiver)
            ).defer_async(event_id=event_id, receiver=receiver)
        except AlreadyEnqueued:
            pass

    def wait_for(self, attempts_made: int) -> float:
        """The wait after the failure of attempt `attempts_made + 1`: doubled each time, at most an hour
        (or the first wait, if that is longer)."""
        return min(self.backoff * (2 ** min(attempts_made, 30)), max(self.backoff, MAX_WAIT_SECONDS))

    def deliver_once(self, event_id: str, receiver: str) -> None:
        """Send one event to one receiver, unless it was delivered already (or is dead); `RetryLater`
        when it failed and attempts are left, dead-lettered when none are. Whatever fails in the
        sending counts as a failed attempt."""
        found = self.store.pending(event_id, receiver)
        if found is None:
            return
        event, attempts = found
        try:
            self.routes.send(receiver, event)
        except Exception as exc:
            why = str(exc) if isinstance(exc, DeliveryFailed) else f"{type(exc).__name__}: {exc}"[:300]
            if attempts + 1 >= self.attempts:
                self.store.mark(event_id, receiver, "dead", why)
                log.warning(
                    "event %s to %s: dead after %d attempts: %s", event_id, receiver, self.attempts, why
                )
                return
            self.store.mark(event_id, receiver, "pending", why)
            raise RetryLater(why, self.wait_for(attempts)) from None
        self.store.mark(event_id, receiver, "delivered")
        log.info("delivered %s (%s, thread %s) to %s", event_id, event.kind, event.thread_id, receiver)

    # -- for the command line ---------------------------------------------------------------------

    def retry(self, event_id: str | None) -> int:
        """Make dead deliveries (of one event, or all) pending again, for the relay to queue; how many."""
        return len(self.store.revive(event_id))

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
