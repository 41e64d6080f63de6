"""Fixtures: real services, started once per test session (per xdist worker), and the real CLI.

An embedded PostgreSQL server and, when a test asks for the Redis backend, a Redis Stack server (or
the one `REDIS_URL` names). Every test gets its own database and data directory, and runs the real CLI
in real child processes through the `cli` fixture. On Redis, search indexes exist only in logical
database 0, so a worker's tests share its server, one at a time, and each test finds it empty
(`redis_url`); on a Redis that `REDIS_URL` names, tests keep apart by thread IDs of their own
(`unique_id`).
The helpers behind these fixtures live in `tests/support/`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO
from tests.support.backends import checkpointer_env
from tests.support.bounds import Bounds, add_tier_timeout, report_running, tidy_running
from tests.support.cli import Cli, clean_environ
from tests.support.crashkit import Harness
from tests.support.scratch import use_scratch
from tests.support.services import RedisServer, embedded_servers_since, new_database, outer_postgres_server
from tests.support.services import postgres_server as start_postgres_server
from tests.support.web import WebServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server (the embedded binary), shared by the session's tests."""
    with start_postgres_server() as uri:
        yield uri


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A new, empty database on the session's server."""
    return new_database(postgres_server)


def _redis(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[str]:
    """`REDIS_URL` if set, else a Redis Stack server of its own in a folder named `name`."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    server = RedisServer(tmp_path_factory.mktemp(name)).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis with search and JSON for the session: `REDIS_URL` if set, else a Redis Stack server."""
    yield from _redis(tmp_path_factory, "redis")


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis of one module's own, for tests that leave threads the thread index does not list (a
    run killed at the wrong moment, a saver written to directly): listings on the session's shared
    server refuse such threads, whichever test they belong to."""
    yield from _redis(tmp_path_factory, "own-redis")


@pytest.fixture
def redis_url(redis_server_url: str) -> str:
    """The session's Redis, emptied for this test: a worker runs one test at a time and has a Redis
    of its own, so each test reads only what it wrote (a listing of every thread, the inbox, sees no
    other test's threads, however they were left). FLUSHALL drops the search indexes too, which each
    process creates again as it opens its store. A Redis named by `REDIS_URL` is shared (a nested
    session's, or a machine's own) and is not emptied: tests keep apart there by thread ID."""
    if not os.environ.get("REDIS_URL"):
        import redis

        with redis.Redis.from_url(redis_server_url) as client:
            client.flushall()
    return redis_server_url


@pytest.fixture(scope="session")
def lasting() -> Iterator[Callable[[Hashable, Callable[[], AbstractContextManager[Any]]], Any]]:
    """Servers kept for the rest of the session once a test has started them: `lasting(key, start)`
    enters `start()` the first time `key` is asked for and returns what it gave every time; all are
    left at the session's end. For servers a module's tests share (`langgraph dev`), so that an
    order that leaves the module and comes back (the census's random one) does not start them
    again each time."""
    held: dict[Hashable, Any] = {}
    with ExitStack() as stack:

        def get(key: Hashable, start: Callable[[], AbstractContextManager[Any]]) -> Any:
            if key not in held:
                held[key] = stack.enter_context(start())
            return held[key]

        yield get


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    """A fork server that has imported the package, for running many CLI commands cheaply."""
    return Harness(tmp_path_factory.mktemp("children"))


@pytest.fixture(autouse=True)
def _embedded_servers_stopped(tmp_path: Path) -> Iterator[None]:
    """The embedded PostgreSQL servers that a test's commands started for data directories in its
    `tmp_path` are stopped, and their files deleted, as the test ends (see `embedded_servers_since`):
    nothing else would stop them, and as root their files live outside `tmp_path`."""
    started = embedded_servers_since()
    yield
    started(inside=tmp_path)


@pytest.fixture
def cli(request: pytest.FixtureRequest, tmp_path: Path, harness: Harness) -> Cli:
    """The real CLI against this test's data directory and store: PostgreSQL unless the test is
    parametrised over `BACKENDS` (see `both_backends`)."""
    backend = getattr(request, "param", "postgres")
    env = clean_environ() | {"MA_DATA_DIR": str(tmp_path / "data")} | checkpointer_env(request, backend)
    return Cli(env=env, cwd=tmp_path, harness=harness)


@pytest.fixture
def fresh_cli(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: str, harness: Harness
) -> Callable[[], Cli]:
    """Make further CLIs, each with a database and data directory of its own (reference runs)."""

    def make() -> Cli:
        tmp = tmp_path_factory.mktemp("ref")
        env = clean_environ() | {
            "MA_DATA_DIR": str(tmp / "data"),
            "POSTGRES_URL": new_database(postgres_server, prefix="r_"),
        }
        return Cli(env=env, cwd=tmp, harness=harness)

    return make


@pytest.fixture
def serve(tmp_path: Path, harness: Harness) -> Iterator[Callable[..., WebServer]]:
    """Start `market-analyst serve` with a CLI's settings, forked from the session's fork server
    (`command` replaces it with a command of its own, run from the repository); every server started
    is stopped after the test."""
    servers: list[WebServer] = []

    def start(
        cli: Cli, *args: str, command: list[str] | None = None, env: dict[str, str] | None = None
    ) -> WebServer:
        server = WebServer(
            env=cli.env | (env or {}),
            cwd=REPO if command else cli.cwd,
            log=tmp_path / f"serve-{len(servers)}.log",
            command=command,
            harness=harness,
        )
        servers.append(server)
        return server.start(*args)

    yield start
    for server in servers:
        server.stop()


TIERS = ("unit", "conformance", "journeys", "system")


def pytest_configure(config: pytest.Config) -> None:
    """Every test process keeps its scratch files where the run does (tests/support/scratch.py) and
    bounds its tests (tests/support/bounds.py); the xdist controller runs none."""
    use_scratch()  # before any temporary file is made, and before the workers start
    controller = not hasattr(config, "workerinput")
    if controller and outer_postgres_server() is None:
        tidy_running()  # a whole run starts: what ended processes left is not this run's
    if not (controller and config.getoption("numprocesses", None)):
        config.pluginmanager.register(Bounds(), "market-analyst-bounds")


_TIER_SECONDS: dict[str, list[float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each tier's test time (setup, call and teardown), for the summary."""
    tier = report.nodeid.split("/", 2)[1] if report.nodeid.startswith("tests/") else "other"
    seconds = _TIER_SECONDS.setdefault(tier, [0.0, 0])
    seconds[0] += report.duration
    seconds[1] += report.when == "call"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each tier's total test time, and any worker that the bound's backstop had to end, with its
    threads' stacks."""
    from io import StringIO

    if _TIER_SECONDS:
        totals = ", ".join(
            f"{tier} {seconds:.0f} s ({int(count)} tests)"
            for tier, (seconds, count) in sorted(_TIER_SECONDS.items(), key=lambda kv: -kv[1][0])
        )
        terminalreporter.write_line(f"test time by tier, all workers together: {totals}")
    out = StringIO()
    report_running(out, running=False)
    if out.getvalue():
        terminalreporter.section("tests past their bound")
        terminalreporter.write(out.getvalue())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test is marked with its tier, which is the folder it lives in (`pytest -m unit`), and
    bounded by its tier's timeout unless it names its own (tests/support/bounds.py); a test marked
    `xdist_group` is given its group (see `_group_suffix`)."""
    for item in items:
        parts = item.path.relative_to(REPO / "tests").parts
        if len(parts) < 2 or parts[0] not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in one of tests/{{{','.join(TIERS)}}}/")
        item.add_marker(parts[0])
        add_tier_timeout(item, parts[0])
        if getattr(config.option, "loadgroup", False):
            _group_suffix(item)


def _group_suffix(item: pytest.Item) -> None:
    """Give a test marked `xdist_group` the `@GROUP` suffix that `--dist loadgroup` reads on the
    controller. pytest-xdist sets it on `item._nodeid`, which pytest 9.2 no longer reads (its node IDs
    are structured: pytest-xdist issue #1386): the tests of a group were spread over every worker,
    each worker starting the group's `langgraph dev` servers again. A suffix already there is kept."""
    from _pytest.nodeid import NodeId

    names = {
        str(m.args[0] if m.args else m.kwargs.get("name", "default"))
        for m in item.iter_markers("xdist_group")
    }
    if names and "@" not in item.nodeid.rsplit("]", 1)[-1]:
        item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(names))}")
