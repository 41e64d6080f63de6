"""Real services, started once per test session (per xdist worker): an embedded PostgreSQL server.

Every test gets its own database on that server and its own data directory, and runs the real CLI
in real child processes through the `cli` fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from market_analyst.services import embedded_postgres_uri, stop_embedded_postgres

REPO = Path(__file__).resolve().parent.parent
# Variables the application reads; stripped from the environment the tests inherit.
_APP_VARS = ("MA_", "POSTGRES_URL", "REDIS_URL", "QDRANT_", "SOURCE_DATE_EPOCH", "OPENAI_")


def clean_environ() -> dict[str, str]:
    """The process environment without any of the application's own settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_APP_VARS)}


def market_analyst_command() -> list[str]:
    """The installed console script of the interpreter running the tests."""
    script = Path(sys.executable).parent / "market-analyst"
    return [str(script)] if script.exists() else [sys.executable, "-m", "market_analyst"]


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL server (the embedded binary), shared by the session's tests."""
    pgdata = tmp_path_factory.mktemp("pg") / "data"
    uri = embedded_postgres_uri(pgdata)
    yield uri
    stop_embedded_postgres(pgdata)


def _with_database(uri: str, database: str) -> str:
    base, _, query = uri.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{database}" + (f"?{query}" if query else "")


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A new, empty database on the session's server."""
    name = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return _with_database(postgres_server, name)


@dataclass
class Result:
    """A finished CLI process."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> object:
        return json.loads(self.stdout)


@dataclass
class Cli:
    """Runs `market-analyst` in a child process with this test's settings."""

    env: dict[str, str]
    cwd: Path
    calls: list[list[str]] = field(default_factory=list)

    def run(self, *args: str, extra_env: dict[str, str] | None = None, timeout: float = 120) -> Result:
        self.calls.append(list(args))
        proc = subprocess.run(
            [*market_analyst_command(), *args],
            cwd=self.cwd,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def ok(self, *args: str, **kwargs: object) -> Result:
        result = self.run(*args, **kwargs)  # type: ignore[arg-type]
        assert result.returncode == 0, f"{args} failed ({result.returncode}): {result.stderr}"
        return result

    def fails(self, *args: str, **kwargs: object) -> Result:
        """Run a command that must fail with exactly one line on stderr and no traceback."""
        result = self.run(*args, **kwargs)  # type: ignore[arg-type]
        assert result.returncode != 0, f"{args} should have failed: {result.stdout}"
        assert "Traceback" not in result.stderr, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got: {result.stderr!r}"
        return result

    @property
    def data_dir(self) -> Path:
        return Path(self.env["MA_DATA_DIR"])


@pytest.fixture
def cli(tmp_path: Path, postgres_url: str) -> Cli:
    """The real CLI against this test's database and data directory (PostgreSQL backend)."""
    env = clean_environ() | {"MA_DATA_DIR": str(tmp_path / "data"), "POSTGRES_URL": postgres_url}
    return Cli(env=env, cwd=tmp_path)
