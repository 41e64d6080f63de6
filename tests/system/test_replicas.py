"""Two `market-analyst serve` replicas sharing one PostgreSQL records database and one checkpointer
(PostgreSQL, or Redis with PostgreSQL records) behave as one inbox: a session made through one works
through the other and a sign-out through either ends it on both, an approver removed anywhere is
refused by both at their next request, sixteen concurrent approvals spread over both publish one
report, and a replica killed with SIGKILL during an approval is finished by the other with one report.

Each replica has a data directory of its own, as on two hosts, so nothing they agree on can come from
files they share: with `MA_RECORDS=postgres` the report archive is in PostgreSQL too.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from tests.support import SHARED_RECORDS
from tests.support.backends import both_backends
from tests.support.cli import Cli, market_analyst_command, unique_id
from tests.support.web import FormClient, WebServer

KILL_AFTER_ARCHIVE_WRITE = [sys.executable, "-m", "tests.support.crash_child", "after-archive-write"]


def _records(cli: Cli, request: pytest.FixtureRequest) -> str:
    """Point the CLI at the PostgreSQL records database (the checkpointer's, on PostgreSQL); the URL
    of the records database."""
    url = cli.env.get("POSTGRES_URL") or request.getfixturevalue("postgres_url")
    cli.env.update({"POSTGRES_URL": url, **SHARED_RECORDS})
    cli.env["MA_LEASE_TTL_SECONDS"] = "2"  # on Redis, a killed replica's lease lasts this long
    return url


def _replica(
    serve: Callable[..., WebServer], cli: Cli, name: str, env: dict[str, str] | None = None, **kwargs
) -> WebServer:
    return serve(cli, env={"MA_DATA_DIR": str(cli.cwd / name)} | (env or {}), **kwargs)


def _archive(cli: Cli) -> list[str]:
    """The keys of the archived reports (in PostgreSQL: no replica or command wrote a file)."""
    for place in (cli.data_dir, cli.cwd / "host-1", cli.cwd / "host-2"):
        assert not list(place.glob("reports/*.json")), place
    return sorted(r["key"] for r in cli.ok("reports", "list", "--json").json())


def _decide(api: httpx.Client, thread: str) -> httpx.Response:
    found = api.get(f"/api/threads/{thread}")
    draft_id = ((found.json() if found.status_code == 200 else {}).get("request") or {}).get("draft_id", "x")
    return api.post(f"/api/threads/{thread}/approve", json={"draft_id": draft_id})


def _works(client: httpx.Client) -> bool:
    response = client.get("/inbox")
    assert response.status_code in (200, 303), response.text
    return response.status_code == 200


def _on(server: WebServer, cookie: str) -> httpx.Client:
    client = server.client()
    client.cookies.set("ma_session", cookie)
    return client


@both_backends
def test_two_replicas_share_sessions_approvers_and_one_report(
    cli: Cli, serve, request: pytest.FixtureRequest
):
    records = _records(cli, request)
    bob = cli.ok("approvers", "add", "bob").stdout.strip()
    carol = cli.ok("approvers", "add", "carol").stdout.strip()
    thread = unique_id("replicas")
    cli.ok("analyze", "MSFT", "--thread-id", thread, "--user", "ann")
    one, two = _replica(serve, cli, "host-1"), _replica(serve, cli, "host-2")

    # A session made through one replica works through the other; a sign-out through either ends it.
    browser = FormClient(one)
    assert browser.sign_in(bob).status_code == 303
    cookie = browser.http.cookies["ma_session"]
    assert _works(_on(two, cookie)) and _works(browser.http)
    signed_out = FormClient(two)
    signed_out.http.cookies.set("ma_session", cookie)
    assert signed_out.submit("/inbox", "/logout").status_code == 303
    assert not _works(_on(one, cookie)) and not _works(_on(two, cookie))

    # `approvers sessions --revoke` from the command line ends a session on both replicas at once.
    before = {s["session"] for s in cli.ok("approvers", "sessions", "bob", "--json").json()["sessions"]}
    again = FormClient(two)
    assert again.sign_in(bob).status_code == 303
    [listed] = [
        s
        for s in cli.ok("approvers", "sessions", "bob", "--json").json()["sessions"]
        if s["session"] not in before
    ]
    assert _works(_on(one, again.http.cookies["ma_session"]))
    cli.ok("approvers", "sessions", "bob", "--revoke", "--session", listed["session"])
    assert not _works(_on(one, again.http.cookies["ma_session"])) and not _works(again.http)

    # An approver removed through the command line is refused by both replicas at their next request,
    # though each had verified its token (and remembers it) and it had a session on one of them.
    carol_browser = FormClient(two)
    assert carol_browser.sign_in(carol).status_code == 303
    carol_cookie = carol_browser.http.cookies["ma_session"]
    apis = [one.client(carol), two.client(carol)]
    assert [api.get("/api/threads").status_code for api in apis] == [200, 200]
    cli.ok("approvers", "remove", "carol")
    assert [api.get("/api/threads").status_code for api in apis] == [401, 401]
    assert not _works(_on(one, carol_cookie)) and not _works(_on(two, carol_cookie))

    # Failed sign-ins count against one limit whichever replica they reach (five per token ID a minute).
    dan = cli.ok("approvers", "add", "dan").stdout.strip()
    guess = dan.split(".")[0] + "." + "x" * 43
    codes = [(one, two)[n % 2].client(guess).get("/api/threads").status_code for n in range(6)]
    assert codes == [401] * 5 + [429], codes
    assert two.client(dan).get("/api/threads").status_code == 429  # not verified: the limit holds
    assert [server.client().get("/healthz").json()["checks"]["records"] for server in (one, two)] == [
        "ok",
        "ok",
    ]

    # Sixteen approvals of one thread at once, eight through each replica: one report.
    def approve(n: int) -> httpx.Response:
        with (one if n % 2 else two).client(bob) as api:
            return _decide(api, thread)

    with ThreadPoolExecutor(max_workers=16) as pool:
        responses = list(pool.map(approve, range(16)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] + [409] * 15, [r.text for r in responses]
    key = next(r.json()["archive_key"] for r in responses if r.status_code == 200)
    assert _archive(cli) == [key]
    assert cli.ok("status", thread, "--json").json()["status"] == "published"
    actions = [e["action"] for e in cli.ok("audit", "list", "--thread", thread, "--json").json()]
    assert actions == ["approved", "published"]
    assert "one chain" in cli.ok("audit", "verify").stdout
    for host in ("host-1", "host-2"):  # the replicas kept none of it in their own data directories
        assert not list((cli.cwd / host).glob("approvers.json")) and not (cli.cwd / host / "audit").exists()
        assert not (cli.cwd / host / "sessions").exists()
    with psycopg.connect(records) as conn:
        assert conn.execute("SELECT count(*) FROM ma_sessions WHERE name = 'carol'").fetchone() == (0,)
    note = "note: profiles and memories stay in this host's data directory (Qdrant Edge): set QDRANT_URL"
    assert note in (cli.cwd / "serve-0.log").read_text()


@pytest.mark.parametrize("cli", ["redis"], indirect=True)
def test_serve_refuses_shared_checkpoints_with_records_kept_on_this_host(cli: Cli):
    refused = cli.fails("serve", "--port", "1", extra_env={"MA_RECORDS": "postgres"})
    assert refused.returncode == 2 and "set POSTGRES_URL to a server every host reaches" in refused.stderr
    assert not (cli.data_dir / "postgres").exists()  # refused before any store was opened


@both_backends
def test_a_replica_killed_during_an_approval_is_finished_by_the_other_with_one_report(
    cli: Cli, serve, request: pytest.FixtureRequest
):
    _records(cli, request)
    token = cli.ok("approvers", "add", "bob").stdout.strip()
    thread = unique_id("replica-kill")
    cli.ok("analyze", "NVDA", "--thread-id", thread, "--user", "ann")
    doomed = _replica(serve, cli, "host-1", command=KILL_AFTER_ARCHIVE_WRITE)
    survivor = _replica(serve, cli, "host-2")

    with doomed.client(token) as api, pytest.raises(httpx.TransportError):
        _decide(api, thread)  # the replica dies with the document written, the checkpoint not
    assert doomed.proc is not None and doomed.proc.wait(timeout=30) == -9
    assert len(_archive(cli)) == 1
    assert cli.ok("status", thread, "--json").json()["status"] == "approved_pending_publish"

    deadline = time.monotonic() + 30
    with survivor.client(token) as api:
        finished = _decide(api, thread)
        while finished.status_code == 409 and "busy" in finished.text and time.monotonic() < deadline:
            time.sleep(0.2)  # on Redis, the killed replica's lease lives out its TTL first
            finished = _decide(api, thread)
    assert finished.status_code == 200, finished.text
    key = finished.json()["archive_key"]
    assert _archive(cli) == [key]
    assert cli.ok("reports", "show", key, "--json").json()["thread_id"] == thread
    assert cli.ok("status", thread, "--json").json()["status"] == "published"
    published = [
        e for e in cli.ok("audit", "list", "--thread", thread, "--json").json() if e["action"] == "published"
    ]
    assert len(published) == 1 and published[0]["archive_key"] == key


def test_replicas_ten_seconds_apart_in_clock_sign_in_through_each_other(
    cli: Cli, serve, request: pytest.FixtureRequest
):
    """One replica's clock is 10 s ahead of the other's (`faketime`): a sign-in page served by either,
    posted to the other, signs in, and the session works on both. The page's cookie carries the time
    its server signed it at, and the other allows that much skew (MA_CLOCK_SKEW, 30 s by default);
    once, the replica behind took the cookie for one from the future and answered a CSRF 403. With
    MA_CLOCK_SKEW=5s the same sign-in is refused, as clocks further apart than allowed should be."""
    if shutil.which("faketime") is None:
        pytest.skip("needs faketime (Debian's package; .ci/run installs it)")
    _records(cli, request)
    bob = cli.ok("approvers", "add", "bob").stdout.strip()
    ahead = ["faketime", "-f", "+10s", *market_analyst_command()]

    def sign_in(page: WebServer, post: WebServer) -> tuple[int, str]:
        browser = FormClient(page)
        token = browser.csrf("/login")
        other = _on(post, browser.http.cookies["ma_session"])
        answer = other.post("/login", data={"token": bob, "csrf_token": token})
        return answer.status_code, answer.cookies.get("ma_session") or ""

    one, two = _replica(serve, cli, "host-1", command=ahead), _replica(serve, cli, "host-2")
    for page, post in ((one, two), (two, one)):
        status, session = sign_in(page, post)
        assert status == 303 and session.startswith("s."), status
        assert _works(_on(one, session)) and _works(_on(two, session))

    strict = {"MA_CLOCK_SKEW": "5s"}
    three = _replica(serve, cli, "host-3", command=ahead, env=strict)
    four = _replica(serve, cli, "host-4", env=strict)
    assert sign_in(three, four)[0] == 403  # issued 10 s in this replica's future: more than allowed
    assert sign_in(four, three)[0] == 303  # 10 s old by the replica ahead: well within a session's life
