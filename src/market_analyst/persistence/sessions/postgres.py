"""Signed-in sessions and failed sign-in counts of the web inbox in the PostgreSQL records database
(`MA_RECORDS=postgres`), the twins of `files.py` for servers on several hosts: a sign-in through
one server works through every other, a sign-out or a revocation anywhere ends the session
everywhere at its next request, and every server counts against the same limits.

A session row is keyed by the SHA-256 digest of the session ID, as the file is named by it. A use
(`touch`) is one conditional UPDATE of a row that is still there and live, so a revocation racing a
use is never undone. A key's turn is a session advisory lock held for the check it guards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from market_analyst.persistence.postgres.records import RecordsTables
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.persistence.sessions.base import SessionRules, names_a_session, new_session, session_key
from market_analyst.ports import SessionRecord

SESSIONS = "sessions"
SESSION_MIGRATIONS = (
    # One statement a version: the connection prepares every statement it runs.
    """
    CREATE TABLE ma_sessions (
        key text PRIMARY KEY,
        name text NOT NULL,
        token_id text NOT NULL,
        csrf text NOT NULL,
        created_at double precision NOT NULL,
        last_seen double precision NOT NULL,
        client text NOT NULL
    )
    """,
    "CREATE INDEX ma_sessions_name ON ma_sessions (name)",
)
LIMITS = "sign_in_limits"
LIMIT_MIGRATIONS = (
    # One statement a version: the connection prepares every statement it runs.
    """
    CREATE TABLE ma_sign_in_failures (
        id bigserial PRIMARY KEY,
        key text NOT NULL,
        at double precision NOT NULL
    )
    """,
    "CREATE INDEX ma_sign_in_failures_key ON ma_sign_in_failures (key, at)",
    "CREATE INDEX ma_sign_in_failures_at ON ma_sign_in_failures (at)",
)
_COLUMNS = "key, name, token_id, csrf, created_at, last_seen, client"


def _record(row: dict[str, Any]) -> SessionRecord:
    return SessionRecord(**row)


class PostgresSessionStore(SessionRules):
    """Session rows on `server`, ended after `idle` seconds unused or `lifetime` seconds after sign-in."""

    def __init__(self, server: PostgresServer, *, idle: float, lifetime: float) -> None:
        super().__init__(idle=idle, lifetime=lifetime)
        self.tables = RecordsTables(server, SESSIONS, SESSION_MIGRATIONS)

    def create(self, *, name: str, token_id: str, client: str, now: float) -> tuple[str, SessionRecord]:
        """A new session for approver `name`: its ID (for the cookie, never stored) and its record.
        Expired rows are deleted at the same time."""
        session_id, record = new_session(name=name, token_id=token_id, client=client, now=now)
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "DELETE FROM ma_sessions WHERE %s - last_seen >= %s OR %s - created_at >= %s",
                (now, self.idle, now, self.lifetime),
            )
            cur.execute(
                f"INSERT INTO ma_sessions ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (record.key, record.name, record.token_id, record.csrf, now, now, record.client),
            )
        return session_id, record

    def find(self, session_id: str, now: float) -> SessionRecord | None:
        """The live session with this ID, or None (unknown, revoked or timed out)."""
        key = session_key(session_id)
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM ma_sessions WHERE key = %s", (key,))
            row = cur.fetchone()
        if row is None:
            return None
        record = _record(row)
        return None if self._expired(record, now) else record

    def touch(self, key: str, now: float) -> SessionRecord | None:
        """Record a use of a live session; None when it ended meanwhile (it stays ended)."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                f"UPDATE ma_sessions SET last_seen = greatest(last_seen, %s) "
                f"WHERE key = %s AND %s - last_seen < %s AND %s - created_at < %s RETURNING {_COLUMNS}",
                (now, key, now, self.idle, now, self.lifetime),
            )
            row = cur.fetchone()
        return None if row is None else _record(row)

    def sessions(self, name: str, now: float) -> list[SessionRecord]:
        """The live sessions of approver `name`, oldest first."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM ma_sessions WHERE name = %s", (name,))
            found = [_record(row) for row in cur.fetchall()]
        return self._live(found, now)

    def revoke(self, key: str) -> bool:
        """End one session at once; False when there was none under `key`."""
        if not names_a_session(key):
            return False
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM ma_sessions WHERE key = %s RETURNING key", (key,))
            return cur.fetchone() is not None

    def revoke_all(self, name: str) -> int:
        """End every session of approver `name` (sign-out everywhere); how many there were."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM ma_sessions WHERE name = %s", (name,))
            return int(cur.rowcount)


def _turn_key(key: str) -> int:
    digest = hashlib.sha256(f"market-analyst:sign-in-turn:{key}".encode("utf-8", "replace")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresSignInLimits:
    """At most `limit` failures per key in any `window` seconds, counted by every server on every
    host (the records database on `server`). Failures older than the window are deleted as new ones
    are counted, so the table keeps only the last window's."""

    def __init__(self, server: PostgresServer, *, limit: int, window: float) -> None:
        self.tables = RecordsTables(server, LIMITS, LIMIT_MIGRATIONS)
        self.limit = limit
        self.window = window

    @contextmanager
    def turn(self, key: str) -> Iterator[None]:
        """Hold `key`'s turn: no other check of the same key, in any process on any host, runs
        meanwhile (a session advisory lock, released when the check ends or its connection drops)."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (_turn_key(key),))
            try:
                yield
            finally:
                cur.execute("SELECT pg_advisory_unlock(%s)", (_turn_key(key),))

    def retry_after(self, key: str, now: float) -> float | None:
        """None while `key` has failures left; else the seconds until its oldest failure expires."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT count(*) AS n, min(at) AS oldest FROM ma_sign_in_failures WHERE key = %s AND at > %s",
                (key, now - self.window),
            )
            row = cur.fetchone()
        if row is None or row["n"] < self.limit:
            return None
        return max(float(row["oldest"]) + self.window - now, 0.0)

    def failed(self, key: str, now: float) -> None:
        """Count one failure of `key`."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM ma_sign_in_failures WHERE at <= %s", (now - self.window,))
            cur.execute("INSERT INTO ma_sign_in_failures (key, at) VALUES (%s, %s)", (key, now))

    def failures(self, key: str, now: float) -> int:
        """How many failures `key` has in the window now."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT count(*) AS n FROM ma_sign_in_failures WHERE key = %s AND at > %s",
                (key, now - self.window),
            )
            row = cur.fetchone()
        return 0 if row is None else int(row["n"])
