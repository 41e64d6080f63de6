"""The data keys in the PostgreSQL records database (`MA_RECORDS=postgres`), the twin of `files.py`
for servers on several hosts: one row a thread. A deleted row stays in the table's pages and the WAL
until they are rewritten, but only wrapped: without the master key, which the database never holds,
it is noise. On the embedded server `forget` also rewrites the table (`compact`)."""

from __future__ import annotations

from typing import Any

from market_analyst.errors import UserError
from market_analyst.persistence.keys.base import WrappedKey, staged_digest, thread_digest
from market_analyst.persistence.postgres.records import RecordsTables
from market_analyst.persistence.postgres.server import PostgresServer

COMPONENT = "data-keys"
TABLE = "ma_data_keys"
MIGRATIONS = (
    f"""
    CREATE TABLE {TABLE} (
        digest text PRIMARY KEY,
        key_id text NOT NULL UNIQUE,
        thread_id text NOT NULL,
        owner text NOT NULL,
        master text NOT NULL,
        wrapped bytea NOT NULL,
        created_at text NOT NULL
    )
    """,
    f"CREATE INDEX {TABLE}_by_owner ON {TABLE} (owner)",
)
_COLUMNS = "key_id, thread_id, owner, master, wrapped, created_at"


def _key(row: dict[str, Any]) -> WrappedKey:
    return WrappedKey(**{**row, "wrapped": bytes(row["wrapped"])})


class PostgresKeyStore:
    """`KeyStore` as a table of the records database on `server`."""

    def __init__(self, server: PostgresServer) -> None:
        self.tables = RecordsTables(server, COMPONENT, MIGRATIONS)
        self.location = server.describe("records database")

    def by_digest(self, digest: str) -> WrappedKey | None:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE digest = %s", (digest,))
            row = cur.fetchone()
        return _key(row) if row else None

    @staticmethod
    def _insert_absent(cur: Any, digest: str, key: WrappedKey) -> dict[str, Any] | None:
        """Record `key` under `digest` unless a key is recorded there: the row there now (None: none)."""
        cur.execute(
            f"INSERT INTO {TABLE} (digest, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            (digest, key.key_id, key.thread_id, key.owner, key.master, key.wrapped, key.created_at),
        )
        cur.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE digest = %s", (digest,))
        row: dict[str, Any] | None = cur.fetchone()
        return row

    def add(self, key: WrappedKey, *, staged: bool = False) -> WrappedKey:
        current = thread_digest(key.thread_id)
        digest = staged_digest(current) if staged else current
        with self.tables.connect() as conn, conn.cursor() as cur:
            row = self._insert_absent(cur, digest, key)
            if row is None and staged:  # promoted meanwhile by another process: that key is the one
                cur.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE digest = %s", (current,))
                row = cur.fetchone()
        if row is None:
            raise UserError(f"thread {key.thread_id} was erased while it was being written")
        return _key(row)

    def put_stored(self, digest: str, key: WrappedKey) -> WrappedKey:
        """Record `key` under `digest` (a thread's, or its staged one) as another store held it,
        unless a key is recorded there already: the key recorded there now."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            row = self._insert_absent(cur, digest, key)
        if row is None:
            raise UserError(f"the data key of thread {key.thread_id} was erased while it was being copied")
        return _key(row)

    def keys(self) -> list[WrappedKey]:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM {TABLE} ORDER BY digest")
            return [_key(row) for row in cur.fetchall()]

    def promote(self, thread_id: str) -> bool:
        digest = thread_digest(thread_id)
        with self.tables.connect() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {TABLE} WHERE digest = %s FOR UPDATE", (staged_digest(digest),))
            if cur.fetchone() is None:
                return False
            cur.execute(f"DELETE FROM {TABLE} WHERE digest = %s", (digest,))
            cur.execute(f"UPDATE {TABLE} SET digest = %s WHERE digest = %s", (digest, staged_digest(digest)))
            return True

    def erase_thread(self, thread_id: str) -> int:
        digest = thread_digest(thread_id)
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DELETE FROM {TABLE} WHERE digest IN (%s, %s)", (digest, staged_digest(digest)))
            return int(cur.rowcount)

    def erase_owner(self, owner: str) -> int:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DELETE FROM {TABLE} WHERE owner = %s", (owner,))
            return int(cur.rowcount)
