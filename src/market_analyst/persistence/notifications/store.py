"""The event outbox and its deliveries, in the PostgreSQL records database (the records database with
`MA_RECORDS=postgres`, otherwise the data directory's embedded server, which holds the queue too).

`ma_events` is the outbox: the nodes write an event beside what caused it, named by that cause, so
a node re-run after a crash writes nothing twice. `ma_deliveries` holds one row per event and
receiver: what the relay made of the event (`relay`), and where its delivery stands (pending,
delivered, dead). A delivery is made by one job at a time (a thread's jobs for a receiver share a
queue lock), with no transaction open while it waits for the receiver, and marked once it answered:
a worker killed after the receiver answered and before the mark sends it again, with the same ID,
which is why receivers de-duplicate by ID.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from market_analyst.persistence.postgres.records import RecordsTables
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.ports import Event

COMPONENT = "notifications"
MIGRATIONS = (
    """
    CREATE TABLE ma_events (
        seq bigserial UNIQUE,
        event_id text PRIMARY KEY,
        kind text NOT NULL,
        thread_id text NOT NULL,
        at text NOT NULL,
        body jsonb NOT NULL,
        relayed boolean NOT NULL DEFAULT false,
        closed boolean NOT NULL DEFAULT false,
        written timestamptz NOT NULL DEFAULT now()
    )
    """,
    "CREATE INDEX ma_events_waiting ON ma_events (seq) WHERE NOT relayed",
    "CREATE INDEX ma_events_open ON ma_events (seq) WHERE kind = 'requested' AND NOT closed",
    "CREATE INDEX ma_events_thread ON ma_events (thread_id)",
    """
    CREATE TABLE ma_deliveries (
        event_id text NOT NULL REFERENCES ma_events (event_id) ON DELETE CASCADE,
        receiver text NOT NULL,
        status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
        attempts integer NOT NULL DEFAULT 0,
        last_error text,
        delivered_at timestamptz,
        updated timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (event_id, receiver)
    )
    """,
    "CREATE INDEX ma_deliveries_pending ON ma_deliveries (event_id) WHERE status = 'pending'",
)


@dataclass(frozen=True)
class Delivery:
    """One event on its way to one receiver."""

    event_id: str
    receiver: str
    kind: str
    thread_id: str
    status: str
    attempts: int
    last_error: str | None
    at: str


# A decision that ends the wait of a request's draft: no reminder, escalation or expiry after it.
_DECIDED = (
    "SELECT 1 FROM ma_events c WHERE c.thread_id = {request} AND c.body->>'draft_id' = {draft} "
    "AND c.kind IN ('published', 'rejected', 'revised', 'expired')"
)


def _event(body: dict[str, Any]) -> Event:
    return Event(**{**body, "to": tuple(body.get("to") or ())})


def job_lock(thread_id: str, receiver: str) -> str:
    """The queue lock of a thread's deliveries to one receiver: they go one at a time, in order."""
    return f"ma:{receiver}:{thread_id}"


def queueing_lock(event_id: str, receiver: str) -> str:
    """At most one waiting job per delivery."""
    return f"ma:{receiver}:{event_id}"


class NotificationStore:
    """The outbox and the deliveries on `server`."""

    def __init__(self, server: PostgresServer) -> None:
        self.tables = RecordsTables(server, COMPONENT, MIGRATIONS)
        self._conn: Any = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    @contextmanager
    def _connected(self) -> Iterator[Any]:
        """This process's connection to the outbox, opened on first use and kept (a decision writes
        its event without connecting anew), one user at a time; opened again after a failure."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's connection is not its own
                self._conn, self._pid = None, os.getpid()
            if self._conn is not None and not self._conn.closed:
                try:  # kept since an earlier use: a server restarted since then has dropped it
                    self._conn.execute("SELECT 1")
                except psycopg.Error:
                    self._conn.close()
                    self._conn = None
            if self._conn is None or self._conn.closed:
                self._conn = self.tables.open()
            try:
                yield self._conn
            except psycopg.OperationalError as exc:
                self._conn.close()
                self._conn = None
                raise self.tables.stopped(exc) from None

    def put(self, event: Event) -> None:
        """Keep `event`, unless an event of its ID is kept already."""
        self._insert(event, "")

    def put_while_open(self, event: Event) -> None:
        """Keep `event` (a reminder, an escalation) unless its request's draft was decided by now:
        checked in the same statement, so nothing is written after the decision that ends the wait."""
        self._insert(event, f"WHERE NOT EXISTS ({_DECIDED.format(request='%s', draft='%s')})")

    def _insert(self, event: Event, condition: str) -> None:
        row = (event.event_id, event.kind, event.thread_id, event.at, json.dumps(asdict(event)))
        with self._connected() as conn:
            conn.execute(
                "INSERT INTO ma_events (event_id, kind, thread_id, at, body) "
                f"SELECT %s, %s, %s, %s, %s {condition} ON CONFLICT (event_id) DO NOTHING",
                row + ((event.thread_id, event.draft_id) if condition else ()),
            )

    def relay(self, receivers: Callable[[Event], list[str]], limit: int = 500) -> int:
        """Give every event not yet relayed one delivery row per receiver (`receivers(event)`), in the
        order the events were written; returns how many events. Two relays at once take different
        events (or none)."""
        with self._connected() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "SELECT event_id, body FROM ma_events WHERE NOT relayed ORDER BY seq LIMIT %s "
                "FOR UPDATE SKIP LOCKED",
                (limit,),
            )
            rows = cur.fetchall()
            ids = [row["event_id"] for row in rows]
            for row in rows:
                event_id = row["event_id"]
                for receiver in receivers(_event(row["body"])):
                    cur.execute(
                        "INSERT INTO ma_deliveries (event_id, receiver) VALUES (%s, %s) "
                        "ON CONFLICT DO NOTHING",
                        (event_id, receiver),
                    )
            if ids:
                cur.execute("UPDATE ma_events SET relayed = true WHERE event_id = ANY(%s)", (ids,))
        return len(ids)

    def without_job(self, limit: int = 500) -> list[tuple[str, str, str]]:
        """Pending deliveries that no job waits on or works on (never queued, or their job lost):
        `(event_id, receiver, thread_id)`, in the order their events were written."""
        with self._connected() as conn, conn.cursor() as cur:
            cur.execute(
                """
                SELECT d.event_id, d.receiver, e.thread_id
                  FROM ma_deliveries d JOIN ma_events e USING (event_id)
                 WHERE d.status = 'pending'
                   AND NOT EXISTS (
                       SELECT 1 FROM procrastinate_jobs j
                        WHERE j.queueing_lock = 'ma:' || d.receiver || ':' || d.event_id
                          AND j.status IN ('todo', 'doing'))
                 ORDER BY e.seq
                 LIMIT %s
                """,
                (limit,),
            )
            return [(r["event_id"], r["receiver"], r["thread_id"]) for r in cur.fetchall()]

    def pending(self, event_id: str, receiver: str) -> tuple[Event, int] | None:
        """The event of a pending delivery and the attempts made so far; None when it was delivered,
        is dead, or is gone. Read without a lock: one thread's deliveries to a receiver share a queue
        lock, so no two jobs of one delivery run at once."""
        with self._connected() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT d.status, d.attempts, e.body "
                "FROM ma_deliveries d JOIN ma_events e USING (event_id) "
                "WHERE d.event_id = %s AND d.receiver = %s",
                (event_id, receiver),
            )
            row = cur.fetchone()
        if row is None or row["status"] != "pending":
            return None
        return _event(row["body"]), int(row["attempts"])

    def mark(self, event_id: str, receiver: str, status: str, error: str | None = None) -> None:
        """Record one attempt's outcome: `delivered`; `pending` with the error of a failure to retry;
        `dead` with the error of the last failure."""
        with self._connected() as conn:
            conn.execute(
                "UPDATE ma_deliveries SET status = %s, attempts = attempts + 1, last_error = %s, "
                "updated = now(), delivered_at = CASE WHEN %s = 'delivered' THEN now() END "
                "WHERE event_id = %s AND receiver = %s AND status = 'pending'",
                (status, error, status, event_id, receiver),
            )

    def deliveries(self, *, dead: bool = False, thread_id: str | None = None) -> list[Delivery]:
        """Every delivery, and every event not yet given its deliveries (receiver `-`, status
        `waiting`: no worker has run since); only the dead ones, only a thread's; in the order the
        events were written."""
        where, args = ["true"], []
        if dead:
            where.append("d.status = 'dead'")
        if thread_id:
            where.append("e.thread_id = %s")
            args.append(thread_id)
        with self._connected() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT e.event_id, coalesce(d.receiver, '-') AS receiver, e.kind, e.thread_id, "
                "coalesce(d.status, CASE WHEN e.relayed THEN 'none' ELSE 'waiting' END) AS status, "
                "coalesce(d.attempts, 0) AS attempts, d.last_error, e.at "
                "FROM ma_events e LEFT JOIN ma_deliveries d USING (event_id) "
                f"WHERE {' AND '.join(where)} AND (d.event_id IS NOT NULL OR NOT e.relayed) "
                "ORDER BY e.seq, d.receiver",
                args,
            )
            return [Delivery(**row) for row in cur.fetchall()]

    def revive(self, event_id: str | None) -> list[tuple[str, str, str]]:
        """Dead deliveries (of one event, or all) made pending again with no attempts counted: what
        `notifications retry` sends once more. Returns `(event_id, receiver, thread_id)`."""
        with self._connected() as conn, conn.cursor() as cur:
            cur.execute(
                "UPDATE ma_deliveries d SET status = 'pending', attempts = 0, updated = now() "
                "FROM ma_events e WHERE d.event_id = e.event_id AND d.status = 'dead' "
                "AND (%s::text IS NULL OR d.event_id = %s) "
                "RETURNING d.event_id, d.receiver, e.thread_id",
                (event_id, event_id),
            )
            return [(r["event_id"], r["receiver"], r["thread_id"]) for r in cur.fetchall()]

    def open_requests(self) -> list[Event]:
        """The `requested` events whose draft has no decision that ends the wait yet (published,
        rejected, revised or expired): the requests whose due times are still kept. A request found
        decided is closed on the way, so it is not looked at again."""
        with self._connected() as conn, conn.cursor() as cur:
            cur.execute(
                """
                UPDATE ma_events r SET closed = true
                 WHERE r.kind = 'requested' AND NOT r.closed AND EXISTS ({decided})
                """.format(decided=_DECIDED.format(request="r.thread_id", draft="r.body->>'draft_id'"))
            )
            cur.execute("SELECT body FROM ma_events WHERE kind = 'requested' AND NOT closed ORDER BY seq")
            return [_event(row["body"]) for row in cur.fetchall()]

    def close(self, event_id: str) -> None:
        """Keep no more due times for this request (its thread is gone)."""
        with self._connected() as conn:
            conn.execute("UPDATE ma_events SET closed = true WHERE event_id = %s", (event_id,))

    def erase_user(self, user: str, threads: set[str]) -> int:
        """`forget`: remove the events of `threads` (the user's) with their deliveries, and take the
        user's name out of every other event (who acted, who an escalation told); how many events."""
        with self._connected() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("DELETE FROM ma_events WHERE thread_id = ANY(%s)", (sorted(threads),))
            removed = cur.rowcount
            cur.execute("DELETE FROM ma_deliveries WHERE receiver = %s", (f"email:{user}",))
            cur.execute(
                "SELECT event_id, body FROM ma_events WHERE strpos(body->>'by', %s) > 0 "
                "OR body->>'requester' = %s OR body->'to' @> to_jsonb(ARRAY[%s::text])",
                (user, user, user),
            )
            changed = 0
            for row in cur.fetchall():
                body = dict(row["body"])
                names = [n for n in str(body.get("by") or "").split(", ") if n]
                if user not in names and user not in (body.get("to") or []) and body.get("requester") != user:
                    continue
                kept = [n for n in names if n != user]
                body["by"] = ", ".join(kept) or None
                body["requester"] = None if body.get("requester") == user else body.get("requester")
                body["to"] = [n for n in body.get("to") or [] if n != user]
                cur.execute(
                    "UPDATE ma_events SET body = %s WHERE event_id = %s", (json.dumps(body), row["event_id"])
                )
                changed += 1
        return removed + changed

    def known(self, event_id: str) -> bool:
        with self._connected() as conn, conn.cursor() as cur:
            cur.execute("SELECT 1 FROM ma_events WHERE event_id = %s", (event_id,))
            return cur.fetchone() is not None
