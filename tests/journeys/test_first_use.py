"""First use under concurrency: many commands starting at once on a data directory (or a database)
that has never been used. Every one must succeed: the checkpoint tables are created once, and no
process waits on a lock while holding a transaction the migrations wait for."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.cli import clean_environ
from tests.support.crashkit import Harness
from tests.support.services import discard_embedded_postgres, new_database

COMMANDS = 8
ROUNDS = int(os.environ.get("FIRST_USE_ROUNDS", "10"))


def _analyze_together(harness: Harness, env: dict[str, str]) -> list[str]:
    """Start COMMANDS `analyze` at once; return the failures (empty when all succeeded)."""
    jobs = [(["analyze", "NVDA", "--user", f"u{i}", "--json"], env) for i in range(COMMANDS)]
    outcomes = harness.run_together(jobs)
    return [f"exit {o.returncode}: {o.stderr.strip()[-300:]}" for o in outcomes if o.returncode != 0]


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_concurrent_commands_on_a_fresh_data_directory_all_succeed(harness: Harness, round_: int):
    # Outside pytest's temporary root: as root the server runs as a user that must reach the path.
    base = Path(tempfile.mkdtemp(prefix="ma-test-first-use-"))
    env = clean_environ() | {"MA_DATA_DIR": str(base / "data")}
    try:
        assert _analyze_together(harness, env) == []
    finally:
        discard_embedded_postgres(base / "data" / "postgres")
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_concurrent_commands_on_a_fresh_database_all_succeed(
    harness: Harness, postgres_server: str, tmp_path: Path, round_: int
):
    env = clean_environ() | {
        "MA_DATA_DIR": str(tmp_path / "data"),
        "POSTGRES_URL": new_database(postgres_server),
    }
    assert _analyze_together(harness, env) == []
