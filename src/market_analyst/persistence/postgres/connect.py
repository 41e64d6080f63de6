"""Opening a connection to a PostgreSQL server: a bad address or login is the user's to fix
(`UserError`), a server that does not answer is `ServiceUnavailable`; and the advisory lock under
which tables are created once, however many processes start at once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from market_analyst.errors import ServiceUnavailable, UserError
from market_analyst.persistence import CONNECT_TIMEOUT_SECONDS

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


@contextmanager
def setup_lock(cur: Any, key: int, wait_seconds: float, what: str) -> Iterator[None]:
    """Hold advisory lock `key` while tables are created: poll `pg_try_advisory_lock` (a statement
    that returns at once, so nothing stays open between tries; the checkpointer's `_ensure_schema`
    says why) for up to `wait_seconds`, then `ServiceUnavailable` naming `what`; unlocked on the way
    out."""
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
