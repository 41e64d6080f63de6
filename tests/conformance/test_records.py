"""The records database's migrations: numbered per store, applied once whatever the number of
processes starting at once, and a later release's new migration applied on top of the old ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg

from tests.support import REPO

# A store's migrations as a later test release would carry them: a seed row in version 1 shows a
# migration that ran twice (two rows), an index in version 2 shows one applied on top.
CHILD = r"""
import sys
from market_analyst.deps import postgres_server
from market_analyst.persistence.postgres.records import records_connection
from market_analyst.settings import Settings

versions = int(sys.argv[2])
migrations = [
    "CREATE TABLE probe (n integer NOT NULL); INSERT INTO probe VALUES (1)",
    "CREATE INDEX probe_n ON probe (n); INSERT INTO probe VALUES (2)",
][:versions]
settings = Settings.load({"POSTGRES_URL": sys.argv[1], "MA_DATA_DIR": sys.argv[3]}, dotenv=None)
with records_connection(postgres_server(settings), "probe", migrations) as conn:
    print(conn.execute("SELECT count(*) AS n FROM probe").fetchone()["n"])
"""


def _start(url: str, versions: int, data_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(versions), str(data_dir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ledger(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT component, version FROM ma_records_migrations ORDER BY 1, 2").fetchall()
    return [(row[0], row[1]) for row in rows]


def test_migrations_run_once_across_processes_starting_at_once(postgres_url: str, tmp_path: Path):
    children = [_start(postgres_url, 1, tmp_path) for _ in range(6)]
    results = [child.communicate(timeout=120) for child in children]
    assert all(child.returncode == 0 for child in children), [err for _, err in results]
    # Every process saw the table, with the one seed row: version 1 ran exactly once.
    assert {out.strip() for out, _ in results} == {"1"}
    assert _ledger(postgres_url) == [("probe", 1)]

    # A later release adds version 2: started by several processes at once, it too runs once.
    children = [_start(postgres_url, 2, tmp_path) for _ in range(4)]
    results = [child.communicate(timeout=120) for child in children]
    assert all(child.returncode == 0 for child in children), [err for _, err in results]
    assert {out.strip() for out, _ in results} == {"2"}
    assert _ledger(postgres_url) == [("probe", 1), ("probe", 2)]
