"""The records database's migrations: numbered per store, applied once whatever the number of
processes starting at once, and a later release's new migration applied on top of the old ones."""

from __future__ import annotations

from pathlib import Path

import psycopg

from tests.support.crashkit import Harness
from tests.support.port_writers import open_probe_records


def _ledger(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT component, version FROM ma_records_migrations ORDER BY 1, 2").fetchall()
    return [(row[0], row[1]) for row in rows]


def test_migrations_run_once_across_processes_starting_at_once(
    postgres_url: str, tmp_path: Path, harness: Harness
):
    # Each process opens the records database in a child of its own, all let go at once.
    rows = harness.call_together(open_probe_records, [(postgres_url, 1, str(tmp_path))] * 6)
    # Every process saw the table, with the one seed row: version 1 ran exactly once.
    assert set(rows) == {1}
    assert _ledger(postgres_url) == [("probe", 1)]

    # A later release adds version 2: started by several processes at once, it too runs once.
    rows = harness.call_together(open_probe_records, [(postgres_url, 2, str(tmp_path))] * 4)
    assert set(rows) == {2}
    assert _ledger(postgres_url) == [("probe", 1), ("probe", 2)]
