"""The PostgreSQL checkpointer: `PostgresSaver` on the embedded server or `POSTGRES_URL`, plus its lease.
The connection and the set-up lock are `persistence.postgres`'s, shared with the records database.

The lease is a session advisory lock on a connection of its own, released by the server when the
session ends, so a killed process frees it at once.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from market_analyst.errors import ThreadBusy
from market_analyst.persistence.checkpoints.rewriting import Rewrite, ThreadRewriter
from market_analyst.persistence.checkpoints.thread_index import OUTBOX, POSTGRES_SCHEMA, PostgresThreadIndex
from market_analyst.persistence.keys.base import Keyring
from market_analyst.persistence.postgres.connect import postgres_connect, setup_lock
from market_analyst.redaction import redact_url

# A fixed advisory-lock key that serialises schema set-up between processes starting at once.
_SETUP_LOCK_KEY = 0x6D615F7365747570  # "ma_setup"
# How long a command waits for another one to finish creating the checkpoint tables.
SETUP_WAIT_SECONDS = 60.0


def advisory_key(thread_id: str) -> int:
    """A signed 64-bit advisory-lock key for a thread ID."""
    return int.from_bytes(
        hashlib.sha256(f"market-analyst:{thread_id}".encode()).digest()[:8], "big", signed=True
    )


@dataclass
class PostgresBackend(ThreadRewriter):
    """PostgresSaver over one autocommit connection; leases are session advisory locks."""

    saver: Any
    uri: str
    description: str
    index: PostgresThreadIndex
    embedded: bool = False
    keyring: Keyring | None = None
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
            if self.keyring is not None:
                self.keyring.refresh(thread_id)  # another process may have re-keyed the thread
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
        """Delete the thread's checkpoints, then its data key; an advisory lock leaves no lease key
        behind to delete."""
        self.saver.delete_thread(thread_id)
        if self.keyring is not None:
            self.keyring.forget_thread(thread_id)
        return 0

    def _rewrite(self, thread_id: str, plan: Rewrite) -> None:
        """`ThreadRewriter`'s rewrite, in one transaction."""
        from market_analyst.persistence.checkpoints.sealing import Sealed

        serde, conn = self.saver.serde, self.saver.conn
        clear_only = "" if plan.everything else "AND position('+' in type) = 0 "
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "SELECT checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs "
                f"WHERE thread_id = %s {clear_only}AND type <> 'empty' AND blob IS NOT NULL FOR UPDATE",
                (thread_id,),
            )
            blobs = cur.fetchall()
            cur.execute(
                "SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob FROM "
                f"checkpoint_writes WHERE thread_id = %s {clear_only}AND blob IS NOT NULL FOR UPDATE",
                (thread_id,),
            )
            writes = cur.fetchall()
            cur.execute(
                "SELECT checkpoint_ns, checkpoint_id, checkpoint FROM checkpoints WHERE thread_id = %s "
                "AND EXISTS (SELECT 1 FROM jsonb_each(checkpoint -> 'channel_values') AS v "
                "WHERE jsonb_typeof(v.value) <> 'null') FOR UPDATE",
                (thread_id,),
            )
            inline = cur.fetchall()
            if not (blobs or writes or inline):
                return

            def seal(channel: str, value: Any) -> tuple[str, bytes]:
                return serde.dumps_typed(Sealed(plan.apply(channel, value), plan.cipher()))

            for row in blobs:
                cur.execute(
                    "UPDATE checkpoint_blobs SET type = %s, blob = %s WHERE thread_id = %s AND "
                    "checkpoint_ns = %s AND channel = %s AND version = %s",
                    (
                        *seal(row["channel"], serde.loads_typed((row["type"], bytes(row["blob"])))),
                        *(thread_id, row["checkpoint_ns"], row["channel"], row["version"]),
                    ),
                )
            for row in writes:
                cur.execute(
                    "UPDATE checkpoint_writes SET type = %s, blob = %s WHERE thread_id = %s AND "
                    "checkpoint_ns = %s AND checkpoint_id = %s AND task_id = %s AND idx = %s",
                    (
                        *seal(row["channel"], serde.loads_typed((row["type"], bytes(row["blob"])))),
                        *(thread_id, row["checkpoint_ns"], row["checkpoint_id"], row["task_id"], row["idx"]),
                    ),
                )
            for row in inline:
                checkpoint = row["checkpoint"]
                values, versions = (
                    checkpoint.get("channel_values", {}),
                    checkpoint.get("channel_versions", {}),
                )
                kept = {}
                for channel, value in values.items():
                    if value is None or channel not in versions:
                        kept[channel] = value
                        continue
                    # Upstream's own place for a value that is not inline: a blob at its version.
                    cur.execute(
                        "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, "
                        "blob) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (thread_id, checkpoint_ns, "
                        "channel, version) DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob",
                        (
                            *(thread_id, row["checkpoint_ns"], channel, str(versions[channel])),
                            *seal(channel, value),
                        ),
                    )
                cur.execute(
                    "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{channel_values}', %s) "
                    "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
                    (Jsonb(kept), thread_id, row["checkpoint_ns"], row["checkpoint_id"]),
                )

    def thread_ids(self) -> list[str]:
        """Every thread with at least one checkpoint."""
        with self.saver.conn.cursor() as cur:
            cur.execute(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE checkpoint_ns = '' ORDER BY thread_id"
            )
            return [row["thread_id"] for row in cur.fetchall()]


@functools.cache
def _sealed_saver_class() -> Any:
    """`PostgresSaver` sealing what it stores under the thread's data key (see `sealing`)."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    from market_analyst.persistence.checkpoints.order import followed, refuse_out_of_order
    from market_analyst.persistence.checkpoints.sealing import AllowlistSaver, Sealed, thread_of

    class SealedPostgresSaver(AllowlistSaver, PostgresSaver):
        keyring: Keyring | None = None

        def get_tuple(self, config: Any) -> Any:
            return followed(super().get_tuple(config))  # the IDs made next follow it (`order`)

        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            refuse_out_of_order(config, checkpoint)
            if self.keyring is None:
                return super().put(config, checkpoint, metadata, new_versions)
            cipher = self._cipher(config)
            values: dict[str, Any] = {}
            versions = dict(new_versions)
            for channel, value in checkpoint["channel_values"].items():
                if value is None or isinstance(value, _DeltaSnapshot):
                    values[channel] = value
                    continue
                values[channel] = Sealed(value, cipher)
                if channel not in versions and isinstance(value, (str, int, float, bool)):
                    # Upstream keeps such a value inline in every checkpoint, so a thread written
                    # before sealing has no blob at its current version: this stores it (or, when
                    # it is stored already, does nothing).
                    known = checkpoint.get("channel_versions", {}).get(channel)
                    if known is not None:
                        versions[channel] = known
            sealed = {**checkpoint, "channel_values": values}
            return super().put(config, sealed, metadata, versions)  # type: ignore[arg-type]

        def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            if self.keyring is not None:
                cipher = self._cipher(config)
                writes = [(channel, Sealed(value, cipher)) for channel, value in writes]
            super().put_writes(config, writes, task_id, task_path)

        def _cipher(self, config: Any) -> Any:
            """The thread's cipher. Making its key the first time asks the thread index on this
            saver's connection, which (with async durability) a background thread may be writing
            through at that moment: so under the saver's own lock, as its writes are."""
            assert self.keyring is not None
            with self.lock:
                return self.keyring.cipher_for(thread_of(config))

    return SealedPostgresSaver


def _schema_current(conn: Any, saver: Any) -> bool:
    """True when the saver's migrations have all been applied (read in one short statement)."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('checkpoint_migrations') IS NOT NULL AS present")
        row = cur.fetchone()
        if not row or not row["present"]:
            return False
        cur.execute("SELECT max(v) AS v FROM checkpoint_migrations")
        row = cur.fetchone()
        # The last table of the index: a database set up by an earlier release lacks it, and gets it.
        cur.execute(f"SELECT to_regclass('{OUTBOX}') IS NOT NULL AS present")
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
def open_postgres(
    uri: str, *, embedded: bool = False, keyring: Keyring | None = None
) -> Iterator[PostgresBackend]:
    """Connect to `uri` (the embedded server's, when `embedded`), make sure the checkpoint tables
    exist, and yield the backend; close it afterwards. With a `keyring`, every value is sealed under
    its thread's data key, and the thread index says whose thread it is."""
    from market_analyst.persistence.checkpoints.sealing import SealingSerializer

    description = redact_url(uri)
    conn = postgres_connect(uri, description, embedded=embedded)
    try:
        saver = _sealed_saver_class()(conn)
        index = PostgresThreadIndex(conn)
        if keyring is not None:
            saver.keyring = keyring
            saver.serde = SealingSerializer(saver.serde, keyring)
            keyring.owner_of = index.owner
        _ensure_schema(conn, saver)
        yield PostgresBackend(
            saver=saver, uri=uri, description=description, index=index, embedded=embedded, keyring=keyring
        )
    finally:
        conn.close()
