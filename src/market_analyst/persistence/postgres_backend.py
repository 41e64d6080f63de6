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

from market_analyst.errors import ThreadBusy, UserError
from market_analyst.persistence import CONNECT_TIMEOUT_SECONDS
from market_analyst.redaction import redact_url
from market_analyst.settings import Settings

# A fixed advisory-lock key that serialises schema set-up between processes starting at once.
_SETUP_LOCK_KEY = 0x6D615F7365747570  # "ma_setup"
SETUP_WAIT_SECONDS = 60.0


def advisory_key(thread_id: str) -> int:
    """A signed 64-bit advisory-lock key for a thread ID."""
    return int.from_bytes(
        hashlib.sha256(f"market-analyst:{thread_id}".encode()).digest()[:8], "big", signed=True
    )


def postgres_connect(uri: str, description: str) -> Any:
    """An autocommit psycopg connection, or `UserError` naming the server without its password."""
    try:
        return psycopg.Connection.connect(
            uri,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
        )
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"cannot connect to PostgreSQL at {description}: {reason.rstrip('.')}; start one with "
            "'docker compose up -d postgres', or unset POSTGRES_URL to use the embedded server"
        ) from None


@dataclass
class PostgresBackend:
    """PostgresSaver over one autocommit connection; leases are session advisory locks."""

    saver: Any
    uri: str
    description: str
    outage_errors: tuple[type[BaseException], ...] = field(
        default=(psycopg.OperationalError, psycopg.InterfaceError)
    )

    @contextmanager
    def lease(self, thread_id: str) -> Iterator[None]:
        """Hold `pg_try_advisory_lock` on the thread's key, or raise `ThreadBusy` without waiting."""
        conn = postgres_connect(self.uri, self.description)
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


def _set_up_once(conn: Any, saver: Any, description: str) -> None:
    """Run `saver.setup()` in one process at a time: idempotent, but two processes migrating a new
    database at once would collide.

    The lock is polled, never waited for inside a statement: setup creates indexes concurrently,
    which waits for every open transaction, and a statement blocked on the lock is one. A blocking
    wait deadlocks as soon as a third process arrives while the first is indexing."""
    deadline = time.monotonic() + SETUP_WAIT_SECONDS
    with conn.cursor() as cur:
        while True:
            cur.execute("SELECT pg_try_advisory_lock(%s) AS locked", (_SETUP_LOCK_KEY,))
            row = cur.fetchone()
            if row and row["locked"]:
                break
            if time.monotonic() >= deadline:
                raise UserError(
                    f"the checkpoint tables on {description} are being set up by another process that "
                    f"has not finished in {SETUP_WAIT_SECONDS:g} s; try again"
                )
            time.sleep(0.05)
        try:
            saver.setup()
        finally:
            cur.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))


@contextmanager
def open_postgres(settings: Settings) -> Iterator[PostgresBackend]:
    """Connect, make sure the checkpoint tables exist, and yield the backend; close it afterwards."""
    from langgraph.checkpoint.postgres import PostgresSaver

    uri = _postgres_uri(settings)
    description = redact_url(uri)
    conn = postgres_connect(uri, description)
    try:
        saver = PostgresSaver(conn)
        _set_up_once(conn, saver, description)
        yield PostgresBackend(saver=saver, uri=uri, description=description)
    finally:
        conn.close()
