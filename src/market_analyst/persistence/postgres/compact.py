"""Rewriting what an erasure freed on the embedded server, so its pages and WAL no longer hold it.

A deleted row stays in its table's file as a dead tuple, and in the WAL, until both are rewritten.
Checkpoints are sealed, so there they are only ciphertext whose key is gone; the records database
(an archive or audit log kept with `MA_RECORDS=postgres`) holds text. After an erasure on the
embedded server: `VACUUM (FULL, ANALYZE)` writes each affected table (and the statistics, which
sample column values) into new files and deletes the old ones; then a WAL switch and a checkpoint
let the server delete the segments that held the old rows, which it is set to delete rather than
recycle (`wal_recycle = off`). What the file system does with freed blocks is beyond a program.

An external server is not compacted: its backups and replicas hold their own copies, which no
command here reaches. For checkpoints the erased keys make those copies unreadable."""

from __future__ import annotations

from market_analyst.persistence.postgres.connect import postgres_connect
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.redaction import redact_url

# The tables an erasure deletes from: the checkpoints and their index, the records database's.
ERASED_TABLES = (
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "market_analyst_threads",
    "ma_data_keys",
    "ma_archive_reports",
    "ma_audit_entries",
    "pg_catalog.pg_statistic",
)


def compact_erased(server: PostgresServer) -> list[str]:
    """On the embedded server, rewrite the erased tables and drop the WAL that held their old rows;
    the tables rewritten (none on an external server)."""
    if not server.embedded:
        return []
    uri = server.uri()
    conn = postgres_connect(uri, redact_url(uri), embedded=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_setting('wal_recycle') AS on")
            if cur.fetchone()["on"] != "off":
                cur.execute("ALTER SYSTEM SET wal_recycle = off")
                cur.execute("SELECT pg_reload_conf()")
                cur.execute("SELECT pg_sleep(0.3)")  # the checkpointer process reloads on its signal
            present = []
            for table in ERASED_TABLES:
                cur.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (table,))
                if cur.fetchone()["present"]:
                    present.append(table)
            if present:
                cur.execute(f"VACUUM (FULL, ANALYZE) {', '.join(present)}")
            cur.execute("SELECT pg_switch_wal()")
            cur.execute("CHECKPOINT")
        return present
    finally:
        conn.close()
