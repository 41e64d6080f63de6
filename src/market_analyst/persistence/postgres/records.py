"""The PostgreSQL records database (`MA_RECORDS=postgres`): where approvers, sessions, the session
secret, the audit log and the archive live when several hosts share them.

It is the checkpointer's server (`POSTGRES_URL`, or the embedded one in the data directory). Each
store keeps its tables to itself and creates them with its own numbered migrations, applied once under
an advisory lock whatever the number of processes starting at once; `ma_records_migrations` records
which ones ran.

Stores open one connection per operation, so no process holds anything between requests: the
archive through `records_connection`, the approval stores through `RecordsTables`, which finds the
server's address once per process (finding the embedded server takes a lock and a look at its files)
and again after a failure, so a server that was restarted is reached at its next address.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from market_analyst.errors import ServiceUnavailable
from market_analyst.persistence.postgres.connect import postgres_connect, setup_lock
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.redaction import redact_url

# How long a command waits for another one to finish creating a store's tables.
MIGRATION_WAIT_SECONDS = 60.0

_LEDGER = """
CREATE TABLE IF NOT EXISTS ma_records_migrations (
    component text NOT NULL,
    version integer NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, version)
)"""

_uris: dict[tuple[str | None, str], str] = {}
_migrated: set[tuple[str, str]] = set()
_lock = threading.Lock()


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
    with (
        conn.cursor() as cur,
        setup_lock(cur, _lock_key(component), MIGRATION_WAIT_SECONDS, f"the {component} tables"),
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
def records_connection(server: PostgresServer, component: str, migrations: Sequence[str]) -> Iterator[Any]:
    """An autocommit connection to the records database on `server` with `component`'s tables
    current; closed on exit."""
    uri = server.uri()
    conn = postgres_connect(uri, redact_url(uri), embedded=server.embedded)
    try:
        migrate(conn, component, migrations)
        yield conn
    finally:
        conn.close()


class RecordsTables:
    """The tables of one component of the records database on `server`."""

    def __init__(self, server: PostgresServer, component: str, migrations: Sequence[str]) -> None:
        self.server = server
        self.component = component
        self.migrations = migrations
        self._place = (server.url, str(server.pgdata))

    def _uri(self) -> str:
        with _lock:
            known = _uris.get(self._place)
        if known is None:
            known = self.server.uri()
            with _lock:
                _uris[self._place] = known
        return known

    def open(self) -> Any:
        """An autocommit dict-row connection with this component's tables current, which the caller
        closes (`connect` closes its own)."""
        uri = self._uri()
        try:
            conn = postgres_connect(uri, redact_url(uri), embedded=self.server.embedded)
        except ServiceUnavailable:
            with _lock:
                _uris.pop(self._place, None)
            raise
        try:
            if (uri, self.component) not in _migrated:
                migrate(conn, self.component, self.migrations)
                with _lock:
                    _migrated.add((uri, self.component))
        except BaseException:
            conn.close()
            raise
        return conn

    def stopped(self, exc: Exception) -> ServiceUnavailable:
        """What a connection that stopped answering is reported as (the address is found again next)."""
        uri = self._uri()
        with _lock:
            _uris.pop(self._place, None)
        return ServiceUnavailable(
            f"the records database at {redact_url(uri)} stopped answering ({str(exc).strip()[:200]}); "
            "what finished before is kept: run the command again"
        )

    @contextmanager
    def connect(self) -> Iterator[Any]:
        """An autocommit dict-row connection with this component's tables current; closed on exit."""
        conn = self.open()
        try:
            yield conn
        except psycopg.OperationalError as exc:
            raise self.stopped(exc) from None
        finally:
            conn.close()
