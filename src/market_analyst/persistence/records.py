"""The PostgreSQL records database (`MA_RECORDS=postgres`): where approvers, sessions, the session
secret, the audit log and the archive live when several hosts share them.

It is the checkpointer's server (`POSTGRES_URL`, or the embedded one in the data directory). Each
store keeps its tables to itself and creates them with its own numbered migrations, applied once under
an advisory lock whatever the number of processes starting at once; `ma_records_migrations` records
which ones ran.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from market_analyst.persistence.checkpoints.postgres import postgres_connect, setup_lock
from market_analyst.redaction import redact_url
from market_analyst.settings import Settings

# How long a command waits for another one to finish creating a store's tables.
MIGRATION_WAIT_SECONDS = 60.0

_LEDGER = """
CREATE TABLE IF NOT EXISTS ma_records_migrations (
    component text NOT NULL,
    version integer NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, version)
)"""


def records_uri(settings: Settings) -> str:
    """The records database's connection string: `POSTGRES_URL`, or the embedded server."""
    if settings.postgres_url:
        return settings.postgres_url
    from market_analyst.services import embedded_postgres_uri

    return embedded_postgres_uri(settings.postgres_dir)


def records_location(settings: Settings) -> str:
    """Where the records database is, for messages, without its password (starts nothing)."""
    if settings.postgres_url:
        return f"the PostgreSQL records database at {redact_url(settings.postgres_url)}"
    return f"the PostgreSQL records database in the embedded server at {settings.postgres_dir}"


def _lock_key(component: str) -> int:
    digest = hashlib.sha256(f"market-analyst:records:{component}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _applied(conn: Any, component: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('ma_records_migrations') IS NOT NULL AS present")
        row = cur.fetchone()
        if not row or not row["present"]:
            return 0
        cur.execute(
            "SELECT coalesce(max(version), 0) AS v FROM ma_records_migrations WHERE component = %s",
            (component,),
        )
        row = cur.fetchone()
    return int(row["v"]) if row else 0


def migrate(conn: Any, component: str, migrations: Sequence[str]) -> None:
    """Apply `migrations` (version N is `migrations[N-1]`, one or more statements separated by `;`,
    without parameters) that have not run.

    Fast path: one read when they all have. Otherwise poll `pg_try_advisory_lock` (holding no
    transaction open between tries, as the saver's set-up does) and re-check under the lock; each
    migration and its ledger row commit together."""
    if _applied(conn, component) >= len(migrations):
        return
    with conn.cursor() as cur, setup_lock(
        cur, _lock_key(component), MIGRATION_WAIT_SECONDS, f"the {component} tables"
    ):
        cur.execute(_LEDGER)
        done = _applied(conn, component)
        for version, statement in enumerate(migrations, start=1):
            if version <= done:
                continue
            with conn.transaction():
                # Unprepared, so one migration may hold several statements.
                cur.execute(statement, prepare=False)
                cur.execute(
                    "INSERT INTO ma_records_migrations (component, version) VALUES (%s, %s)",
                    (component, version),
                )


@contextmanager
def records_connection(settings: Settings, component: str, migrations: Sequence[str]) -> Iterator[Any]:
    """An autocommit connection to the records database with `component`'s tables current; closed on
    exit. Stores open one per operation, so no process holds anything between requests."""
    uri = records_uri(settings)
    conn = postgres_connect(uri, redact_url(uri), embedded=not settings.postgres_url)
    try:
        migrate(conn, component, migrations)
        yield conn
    finally:
        conn.close()
