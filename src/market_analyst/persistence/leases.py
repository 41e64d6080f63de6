"""One active writer per thread: a lease held for a command's whole run.

PostgreSQL: a session advisory lock on a connection of its own, released by the server when the
session ends, so a killed process frees it at once. Redis: see `redis_backend.RedisLease`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from market_analyst.errors import ThreadBusy


@contextmanager
def postgres_lease(uri: str, thread_id: str, description: str) -> Iterator[None]:
    """Hold `pg_try_advisory_lock` on the thread's key, or raise `ThreadBusy` without waiting."""
    import psycopg

    from market_analyst.persistence.checkpointers import advisory_key, postgres_connect

    conn = postgres_connect(uri, description)
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
