"""Checkpointers: PostgreSQL (embedded by default, or `POSTGRES_URL`) and Redis (`REDIS_URL`).

`open_checkpointer(settings)` yields a `CheckpointBackend`: a ready saver (`setup()` done) plus the
per-thread lease that belongs to the same backend, and closes both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from market_analyst.errors import UserError
from market_analyst.settings import Settings

CONNECT_TIMEOUT_SECONDS = 5
# A fixed advisory-lock key that serialises schema set-up between processes starting at once.
_SETUP_LOCK_KEY = 0x6D615F7365747570  # "ma_setup"


class CheckpointBackend(Protocol):
    """A ready saver and the lease that keeps one writer per thread on the same backend."""

    saver: Any
    description: str

    def lease(self, thread_id: str) -> AbstractContextManager[None]:
        """Hold the thread's lease for the block, or raise `ThreadBusy` at once."""
        ...

    def thread_ids(self) -> list[str]:
        """Every thread with at least one checkpoint."""
        ...


def redact_url(url: str) -> str:
    """The URL without its password: scheme, user, host, port and database only."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparseable URL>"
    if not host:
        socket_dir = parse_qs(parts.query).get("host", [""])[0]
        host = socket_dir or "localhost"
    user = f"{parts.username}@" if parts.username else ""
    where = f"{host}:{port}" if port else host
    return f"{parts.scheme}://{user}{where}{parts.path}"


def advisory_key(thread_id: str) -> int:
    """A signed 64-bit advisory-lock key for a thread ID."""
    return int.from_bytes(
        hashlib.sha256(f"market-analyst:{thread_id}".encode()).digest()[:8], "big", signed=True
    )


@dataclass
class PostgresBackend:
    """PostgresSaver over one autocommit connection; leases are session advisory locks."""

    saver: Any
    uri: str
    description: str

    @contextmanager
    def lease(self, thread_id: str) -> Iterator[None]:
        from market_analyst.persistence.leases import postgres_lease

        with postgres_lease(self.uri, thread_id, self.description):
            yield

    def thread_ids(self) -> list[str]:
        with self.saver.conn.cursor() as cur:
            cur.execute(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE checkpoint_ns = '' ORDER BY thread_id"
            )
            return [row["thread_id"] for row in cur.fetchall()]


def postgres_connect(uri: str, description: str) -> Any:
    """An autocommit psycopg connection, or `UserError` naming the server without its password."""
    import psycopg
    from psycopg.rows import dict_row

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


def _postgres_uri(settings: Settings) -> str:
    if settings.postgres_url:
        return settings.postgres_url
    from market_analyst.services import embedded_postgres_uri

    return embedded_postgres_uri(settings.postgres_dir)


@contextmanager
def _open_postgres(settings: Settings) -> Iterator[PostgresBackend]:
    from langgraph.checkpoint.postgres import PostgresSaver

    uri = _postgres_uri(settings)
    description = redact_url(uri)
    conn = postgres_connect(uri, description)
    try:
        saver = PostgresSaver(conn)
        # setup() is idempotent, but two processes migrating a new database at once would collide.
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (_SETUP_LOCK_KEY,))
            try:
                saver.setup()
            finally:
                cur.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
        yield PostgresBackend(saver=saver, uri=uri, description=description)
    finally:
        conn.close()


@contextmanager
def open_checkpointer(settings: Settings) -> Iterator[CheckpointBackend]:
    """Yield the ready backend that `settings.checkpointer` selects, and close it afterwards."""
    if settings.checkpointer == "postgres":
        with _open_postgres(settings) as pg:
            yield pg
    else:
        from market_analyst.persistence.redis_backend import open_redis

        with open_redis(settings) as backend:
            yield backend
