"""The event outbox and its deliveries, in the PostgreSQL records database (the records database with
`MA_RECORDS=postgres`, otherwise the data directory's embedded server, which holds the queue too).

`ma_events` is the outbox: the nodes write an event beside what caused it, named by that cause, so
a node re-run after a crash writes nothing twice. `ma_deliveries` holds one row per event and
receiver: what the relay made of the event (`relay`), and where its delivery stands (pending,
delivered, dead). A delivery is made under its row's lock, so two workers never send it at once,
and it is marked delivered in the same transaction: a worker killed after the receiver answered and
before the commit sends it again, with the same ID, which is why receivers de-duplicate by ID.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

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
        written timestamptz NOT NULL DEFAULT now()
    )
    """,
    "CREATE INDEX ma_events_waiting ON ma_events (seq) WHERE NOT relayed",
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


class Claim:
    """A pending delivery whose row this worker holds: the event, and the attempts made before."""

    def __init__(self, event: Event, receiver: str, attempts: int, cursor: Any) -> None:
        self.event, self.receiver, self.attempts, self._cursor = event, receiver, attempts, cursor

    def mark(self, status: str, error: str | None = None) -> None:
        """Record this attempt's outcome: `delivered`; `pending` with the error of a failure to retry;
        `dead` with the error of the last failure."""
        self._cursor.execute(
            "UPDATE ma_deliveries SET status = %s, attempts = attempts + 1, last_error = %s, "
            "updated = now(), delivered_at = CASE WHEN %s = 'delivered' THEN now() END "
            "WHERE event_id = %s AND receiver = %s",
            (status, error, status, self.event.event_id, self.receiver),
        )


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

    def put(self, event: Event) -> None:
        """Keep `event`, unless an event of its ID is kept already."""
        with self.tables.connect() as conn:
            conn.execute(
                "INSERT INTO ma_events (event_id, kind, thread_id, at, body) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (event_id) DO NOTHING",
                (event.event_id, event.kind, event.thread_id, event.at, json.dumps(asdict(event))),
            )

    def relay(self, receivers: list[str], limit: int = 500) -> int:
        """Give every event not yet relayed one delivery row per receiver, in the order the events were
        written; returns how many events. Two relays at once take different events (or none)."""
        with self.tables.connect() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "SELECT event_id FROM ma_events WHERE NOT relayed ORDER BY seq LIMIT %s "
                "FOR UPDATE SKIP LOCKED",
                (limit,),
            )
            ids = [row["event_id"] for row in cur.fetchall()]
            for event_id in ids:
                for receiver in receivers:
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
        with self.tables.connect() as conn, conn.cursor() as cur:
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

    @contextmanager
    def delivering(self, event_id: str, receiver: str) -> Iterator[Claim | None]:
        """The delivery, with its row locked until the block ends (None: delivered or dead already,
        or gone); the block records its outcome with `Claim.mark`, committed as the block ends."""
        with self.tables.connect() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "SELECT d.status, d.attempts, e.body "
                "FROM ma_deliveries d JOIN ma_events e USING (event_id) "
                "WHERE d.event_id = %s AND d.receiver = %s FOR UPDATE OF d",
                (event_id, receiver),
            )
            row = cur.fetchone()
            yield (
                None
                if row is None or row["status"] != "pending"
                else Claim(Event(**row["body"]), receiver, int(row["attempts"]), cur)
            )

    def deliveries(self, *, dead: bool = False, thread_id: str | None = None) -> list[Delivery]:
        """Every delivery (only the dead ones; only a thread's), in the order their events were written."""
        where, args = ["true"], []
        if dead:
            where.append("d.status = 'dead'")
        if thread_id:
            where.append("e.thread_id = %s")
            args.append(thread_id)
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT d.event_id, d.receiver, e.kind, e.thread_id, d.status, d.attempts, "
                "d.last_error, e.at "
                f"FROM ma_deliveries d JOIN ma_events e USING (event_id) WHERE {' AND '.join(where)} "
                "ORDER BY e.seq, d.receiver",
                args,
            )
            return [Delivery(**row) for row in cur.fetchall()]

    def revive(self, event_id: str | None) -> list[tuple[str, str, str]]:
        """Dead deliveries (of one event, or all) made pending again with no attempts counted: what
        `notifications retry` sends once more. Returns `(event_id, receiver, thread_id)`."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "UPDATE ma_deliveries d SET status = 'pending', attempts = 0, updated = now() "
                "FROM ma_events e WHERE d.event_id = e.event_id AND d.status = 'dead' "
                "AND (%s::text IS NULL OR d.event_id = %s) "
                "RETURNING d.event_id, d.receiver, e.thread_id",
                (event_id, event_id),
            )
            return [(r["event_id"], r["receiver"], r["thread_id"]) for r in cur.fetchall()]

    def known(self, event_id: str) -> bool:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT 1 FROM ma_events WHERE event_id = %s", (event_id,))
            return cur.fetchone() is not None
