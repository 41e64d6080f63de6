"""`db status` and `db stop` on a real embedded PostgreSQL in its own data directory."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from tests.support.cli import Cli, clean_environ
from tests.support.crashkit import Harness
from tests.support.services import discard_embedded_postgres


def test_db_status_and_stop_follow_the_embedded_server(harness: Harness):
    # Outside pytest's temporary root: as root the server runs as a user that must reach the path.
    base = Path(tempfile.mkdtemp(prefix="ma-test-db-"))
    cli = Cli(env=clean_environ() | {"MA_DATA_DIR": str(base / "data")}, cwd=base, harness=harness)
    pgdata = base / "data" / "postgres"
    try:
        assert "is not running" in cli.ok("db", "status").stdout
        cli.ok("threads")  # any command that opens the checkpointer starts the server
        running = cli.ok("db", "status").stdout
        match = re.search(r"runs in (\S+) \(pid (\d+)\)", running)
        assert match and match.group(1) == str(pgdata), running
        os.kill(int(match.group(2)), 0)  # the PID named is a live process
        assert f"data directory: {base / 'data'}" in running and "socket:" in running
        found = cli.ok("db", "status", "--json").json()
        assert found["running"] is True and found["pid"] == int(match.group(2))
        assert found["data_dir"] == str(base / "data") and found["socket"].endswith("/.s.PGSQL.5432")
        assert Path(found["socket"]).exists()
        assert f"Stopped the embedded PostgreSQL in {pgdata}" in cli.ok("db", "stop").stdout
        assert "is not running" in cli.ok("db", "status").stdout
        assert "No embedded PostgreSQL runs" in cli.ok("db", "stop").stdout
    finally:
        discard_embedded_postgres(pgdata)
        shutil.rmtree(base, ignore_errors=True)


def test_db_status_names_a_configured_server_without_its_password(cli: Cli):
    url = "postgresql://analyst:hunter2secret@db.example:5433/markets"
    status = cli.ok("db", "status", extra_env={"POSTGRES_URL": url}).stdout
    assert "POSTGRES_URL is set (postgresql://analyst@db.example:5433/markets)" in status
    assert "hunter2secret" not in status and "embedded server is not used" in status
