"""The PostgreSQL checkpointer: `PostgresSaver` on the embedded server or `POSTGRES_URL`, plus its lease.

The lease is a session advisory lock on a connection of its own, released by the server when the
session ends, so a killed process frees it at once.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

from market_analyst.errors import ServiceUnavailable, ThreadBusy, UserError
from market_analyst.persistence import CONNECT_TIMEOUT_SECONDS
from market_analyst.persistence.checkpoints.thread_index import META, POSTGRES_SCHEMA, PostgresThreadIndex
from market_analyst.redaction import redact_url
from market_analyst.settings import Settings

# A fixed advisory-lock key that serialises schema set-up between processes starting at once.
_SETUP_LOCK_KEY = 0x6D615F7365747570  # "ma_setup"
# How long a command waits for another one to finish creating the checkpoint tables.
SETUP_WAIT_SECONDS = 60.0


def advisory_key(thread_id: str) -> int:
    """A signed 64-bit advisory-lock key for a thread ID."""
    return int.from_bytes(
        hashlib.sha256(f"market-analyst:{thread_id}".encode()).digest()[:8], "big", signed=True
    )


# Failures that mean the server's address or login is wrong (the user's to fix), not that it is down.
_CONFIG_PROBLEMS = (
    "password authentication failed",
    "does not exist",
    "no password supplied",
    "could not translate host name",
    "invalid",
    "authentication",
)


def _reason(exc: Exception) -> str:
    """The first informative line of a psycopg error, without its 'connection failed:' prefix."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    return first.removeprefix("connection failed: ").rstrip(".")


def postgres_connect(uri: str, description: str, *, embedded: bool = False) -> Any:
    """An autocommit psycopg connection; a bad address or login is a `UserError`, a server that does not
    answer is `ServiceUnavailable`, each naming the server without its password."""
    try:
        return psycopg.Connection.connect(
            uri,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
        )
    except psycopg.ProgrammingError as exc:  # not a connection string at all
        raise UserError(
            f"POSTGRES_URL is not a PostgreSQL URL or key=value connection string ({description}): "
            f"{_reason(exc)}; use postgresql://user:password@host:5432/database"
        ) from None
    except psycopg.OperationalError as exc:
        reason = _reason(exc)
        if embedded:
            raise ServiceUnavailable(
                f"the embedded PostgreSQL at {description} did not answer ({reason}); nothing was written: "
                "run the command again, which starts it again ('market-analyst db status' shows it)"
            ) from None
        if any(problem in reason for problem in _CONFIG_PROBLEMS):
            raise UserError(f"PostgreSQL at {description} refused the connection: {reason}") from None
        raise ServiceUnavailable(
            f"cannot connect to PostgreSQL at {description}: {reason}; nothing was written. Start it "
            "('docker compose up -d postgres') and run the command again, or unset POSTGRES_URL to use "
            "the embedded server"
        ) from None


@dataclass
class PostgresBackend:
    """PostgresSaver over one autocommit connection; leases are session advisory locks."""

    saver: Any
    uri: str
    description: str
    index: PostgresThreadIndex
    embedded: bool = False
    keeps_history: bool = True
    outage_errors: tuple[type[BaseException], ...] = field(
        default=(psycopg.OperationalError, psycopg.InterfaceError)
    )

    @property
    def restart_hint(self) -> str:
        """What brings the store back after it went away mid-command."""
        if self.embedded:
            return "the embedded PostgreSQL stopped; the next command starts it again"
        return "when the server is back"

    @contextmanager
    def lease(self, thread_id: str) -> Iterator[None]:
        """Hold `pg_try_advisory_lock` on the thread's key, or raise `ThreadBusy` without waiting."""
        conn = postgres_connect(self.uri, self.description, embedded=self.embedded)
        try:
            key = advisory_key(thread_id)
            with conn.cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s) AS locked", (key,))
                row = cur.fetchone()
            if not row or not row["locked"]:
                raise ThreadBusy(thread_id)
            try:
                yield
            finally:
                try:
                    with conn.cursor() as cur:
                        cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
                except psycopg.OperationalError:
                    pass  # the server went away: the lock ended with the session
        finally:
            conn.close()

    def erase_thread(self, thread_id: str) -> int:
        """Delete the thread's checkpoints; an advisory lock leaves no key behind to delete."""
        self.saver.delete_thread(thread_id)
        return 0

    def thread_ids(self) -> list[str]:
        """Every thread with at least one checkpoint."""
        with self.saver.conn.cursor() as cur:
            cur.execute(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE checkpoint_ns = '' ORDER BY thread_id"
            )
            return [row["thread_id"] for row in cur.fetchall()]


def _postgres_uri(settings: Settings) -> str:
    if settings.postgres_url:
        return settings.postgres_url
    from market_analyst.services import embedded_postgres_uri

    return embedded_postgres_uri(settings.postgres_dir)


def _schema_current(conn: Any, saver: Any) -> bool:
    """True when the saver's migrations have all been applied (read in one short statement)."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('checkpoint_migrations') IS NOT NULL AS present")
        row = cur.fetchone()
        if not row or not row["present"]:
            return False
        cur.execute("SELECT max(v) AS v FROM checkpoint_migrations")
        row = cur.fetchone()
        cur.execute(f"SELECT to_regclass('{META}') IS NOT NULL AS present")
        ours = cur.fetchone()
    current = row is not None and row["v"] is not None and row["v"] >= len(saver.MIGRATIONS) - 1
    return current and ours is not None and bool(ours["present"])


def _ensure_schema(conn: Any, saver: Any) -> None:
    """Run the saver's migrations once, whatever the number of commands starting at once.

    The migrations create indexes CONCURRENTLY, which waits for every transaction open in the
    database. A process waiting in `pg_advisory_lock` is such a transaction, so waiting that way
    deadlocks with the migrating process. Here the others poll `pg_try_advisory_lock` (a statement
    that returns at once), holding nothing open between tries, and re-check once they hold the lock."""
    if _schema_current(conn, saver):
        return
    with conn.cursor() as cur, setup_lock(cur, _SETUP_LOCK_KEY, SETUP_WAIT_SECONDS, "the checkpoint tables"):
        if not _schema_current(conn, saver):
            saver.setup()
            for statement in POSTGRES_SCHEMA:  # the thread index, beside the checkpoints
                cur.execute(statement)


@contextmanager
def setup_lock(cur: Any, key: int, wait_seconds: float, what: str) -> Iterator[None]:
    """Hold advisory lock `key` while tables are created: poll `pg_try_advisory_lock` (a statement
    that returns at once, so nothing stays open between tries; see `_ensure_schema`) for up to
    `wait_seconds`, then `ServiceUnavailable` naming `what`; unlocked on the way out."""
    deadline = time.monotonic() + wait_seconds
    pause = 0.02
    while True:
        cur.execute("SELECT pg_try_advisory_lock(%s) AS locked", (key,))
        row = cur.fetchone()
        if row and row["locked"]:
            break
        if time.monotonic() > deadline:
            raise ServiceUnavailable(
                f"another command has been creating {what} for {wait_seconds:g} s; "
                "nothing was written: run the command again"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.5)
    try:
        yield
    finally:
        cur.execute("SELECT pg_advisory_unlock(%s)", (key,))


@contextmanager
def open_postgres(settings: Settings) -> Iterator[PostgresBackend]:
    """Connect, make sure the checkpoint tables exist, and yield the backend; close it afterwards."""
    from langgraph.checkpoint.postgres import PostgresSaver

    embedded = not settings.postgres_url
    uri = _postgres_uri(settings)
    description = redact_url(uri)
    conn = postgres_connect(uri, description, embedded=embedded)
    try:
        saver = PostgresSaver(conn)
        _ensure_schema(conn, saver)
        yield PostgresBackend(
            saver=saver, uri=uri, description=description, index=PostgresThreadIndex(conn), embedded=embedded
        )
    finally:
        conn.close()
