"""One thread, every door: LangGraph's server (`langgraph dev`, as docs/langgraph-server.md starts it)
keeps its checkpoints in the project's own saver (`graphs/checkpointer.py`), so a thread started
through the server survives a `kill -9` of the server, is listed and decided by the command line,
and a thread started by the command line is decided through the server; `forget` reaches what the
server kept. On the embedded PostgreSQL (the default) and on Redis."""

from __future__ import annotations

import pickle
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from market_analyst.deps import open_checkpointer
from tests.support import SHARED_RECORDS
from tests.support.cli import Cli
from tests.support.langgraph_dev import DevServer, dev_server, status_of
from tests.support.services import new_database
from tests.system.test_erasure_on_disk import _found, _marker

CALLERS = {"ann": "requester", "bob": "approver", "mallory": "requester", "olga": "operator"}


@pytest.fixture(params=["postgres", "redis"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The checkpointer the server and the commands share: the embedded PostgreSQL in the data
    directory (the default: nothing set), or Redis."""
    env = {"MA_DATA_DIR": str(tmp_path / "home" / "data"), "MA_RECORDS": "files"}
    if request.param == "redis":
        env |= {"MA_CHECKPOINTER": "redis", "REDIS_URL": request.getfixturevalue("redis_url")}
    return env


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ExitStack]:
    """Where the test starts its servers (each stopped, and the embedded PostgreSQL with them, at the
    end; one killed earlier stays dead)."""
    with ExitStack() as stack:
        yield stack


def _cli(server: DevServer, harness: Any, tmp_path: Path) -> Cli:
    return Cli(env=dict(server.env), cwd=tmp_path, harness=harness)


def _request(server: DevServer, who: str, thread: str) -> dict[str, Any]:
    state = server.client(who).threads.get_state(thread)
    assert state["next"] == ["human_review"], state["next"]
    return state["tasks"][0]["interrupts"][0]["value"]


def test_a_server_thread_killed_at_the_gate_is_approved_from_the_command_line_and_published_once(
    place: dict[str, str], servers: ExitStack, tmp_path: Path, harness: Any
):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    first = servers.enter_context(dev_server(home, place, CALLERS, made_by_cli=False))
    ann = first.client("ann")
    thread = ann.threads.create()["thread_id"]
    ann.runs.wait(thread, "analyst", input={"ticker": "NVDA", "question": "what of the data centres?"})
    request = _request(first, "bob", thread)
    first.kill()  # kill -9 while the thread waits at the gate

    cli = _cli(first, harness, tmp_path)
    listed = cli.ok("threads", "--pending", "--json").json()
    assert [(t["thread_id"], t["user_id"], t["status"]) for t in listed] == [
        (thread, "ann", "awaiting_approval")
    ]
    approved = cli.ok("approve", thread, "--user", "bob", "--note", "from the terminal")
    assert f"Published thread {thread}" in approved.stdout
    [document] = first.reports_of(thread)
    assert (document["draft_id"], document["approved_by"], document["user_id"]) == (
        request["draft_id"],
        "bob",
        "ann",
    )
    audit = [(e["action"], e["door"], e["actor"]) for e in first.audit_of(thread)]
    assert audit == [("approved", "cli", "bob"), ("published", "cli", "bob")]

    # The server started again has no record of the thread of its own (docs: its tables live in
    # memory); reached by its ID, it shows what the saver holds: published, and nothing more to do.
    second = servers.enter_context(dev_server(home, place, {}, tokens=first.tokens))
    bob = second.client("bob")
    assert bob.threads.search() == []
    bob.threads.create(thread_id=thread, if_exists="do_nothing", graph_id="analyst")
    state = bob.threads.get_state(thread)
    assert state["next"] == [] and state["values"]["publication"]["key"] == document["key"]
    decision = {"action": "approve", "draft_id": request["draft_id"], "note": "again"}
    again = bob.runs.wait(thread, "analyst", command={"resume": decision})
    assert again["publication"]["key"] == document["key"]
    assert [d["key"] for d in second.reports_of(thread)] == [document["key"]]
    assert [(e["action"], e["door"], e["actor"]) for e in second.audit_of(thread)] == audit
    # Its owner reaches it by ID too; another requester does not.
    assert (
        second.client("ann").threads.create(thread_id=thread, if_exists="do_nothing", graph_id="analyst")[
            "thread_id"
        ]
        == thread
    )
    assert status_of(
        lambda: second.client("mallory").threads.create(
            thread_id=thread, if_exists="do_nothing", graph_id="analyst"
        )
    ) in (
        403,
        404,
        409,
    )
    # `prune` reaches it as any finished thread (an hour on, by the clock the commands read).
    later = {"SOURCE_DATE_EPOCH": str(int(time.time()) + 7200)}
    pruned = cli.ok("prune", "--finished-before", "1h", "--yes", "--json", extra_env=later).json()
    assert [row["thread_id"] for row in pruned["threads"]] == [thread]
    assert bob.threads.get_state(thread)["values"] == {}


def test_a_command_line_thread_is_decided_through_the_server_and_each_door_sees_the_other(
    place: dict[str, str], servers: ExitStack, tmp_path: Path, harness: Any
):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    server = servers.enter_context(dev_server(home, place, CALLERS, made_by_cli=False))
    cli = _cli(server, harness, tmp_path)
    thread = cli.ok("analyze", "AAPL", "--user", "ann", "--json").json()["thread_id"]

    bob, mallory = server.client("bob"), server.client("mallory")
    # A requester can neither claim another user's thread by its ID nor run on it.
    assert status_of(
        lambda: mallory.threads.create(thread_id=thread, if_exists="do_nothing", graph_id="analyst")
    ) in (403, 404)
    assert status_of(
        lambda: mallory.runs.wait(thread, "analyst", input={"ticker": "AAPL"}, if_not_exists="create")
    ) in (
        403,
        404,
    )
    assert cli.ok("status", thread, "--json").json()["status"] == "awaiting_approval"
    # Nor read one whose ID she took on the server before the thread existed.
    claimed = str(uuid.uuid4())
    mallory.threads.create(thread_id=claimed)
    cli.ok("analyze", "MSFT", "--user", "ann", "--thread-id", claimed)
    assert status_of(lambda: mallory.threads.get_state(claimed)) == 404
    assert status_of(lambda: mallory.threads.get_history(claimed)) == 404

    made = bob.threads.create(thread_id=thread, if_exists="do_nothing", graph_id="analyst")
    assert made["metadata"]["owner"] == "ann" and made["metadata"]["user_id"] == "ann"
    request = _request(server, "bob", thread)
    assert request["requested_by"] == "ann"
    # A run that would roll another back is refused to everyone.
    rollback = {"resume": {"action": "approve", "draft_id": request["draft_id"]}}
    assert (
        status_of(lambda: bob.runs.create(thread, "analyst", command=rollback, multitask_strategy="rollback"))
        == 403
    )
    # An approver decides it; a new analysis on it would make it theirs: refused.
    assert status_of(lambda: bob.runs.wait(thread, "analyst", input={"ticker": "AAPL"})) == 403

    # A revise on the command line is seen at once by the server: a new draft to decide.
    cli.ok("revise", thread, "--user", "bob", "--feedback", "say more about margins")
    revised = _request(server, "bob", thread)
    assert revised["revision"] == 2 and revised["draft_id"] != request["draft_id"]
    stale = {"action": "approve", "draft_id": request["draft_id"], "note": "old text"}
    bob.runs.wait(thread, "analyst", command={"resume": stale})
    assert _request(server, "bob", thread)["refused"]  # asked again: the draft is not the current one
    assert server.reports_of(thread) == []

    decision = {"action": "approve", "draft_id": revised["draft_id"], "note": "through the server"}
    # One writer per thread across doors: while a command holds the thread's lease, the server's run
    # fails at once and records nothing.
    with open_checkpointer(server.settings()) as backend, backend.lease(thread):
        refused = bob.runs.wait(thread, "analyst", command={"resume": decision}, raise_error=False)
        assert refused["__error__"]["error"] == "ThreadBusy", refused  # its text is in the server's log
    assert f"thread {thread} is busy" in server.log.read_text()
    assert server.reports_of(thread) == []
    assert "approved" not in [e["action"] for e in server.audit_of(thread)]
    state = bob.runs.wait(thread, "analyst", command={"resume": decision})
    [document] = server.reports_of(thread)
    assert state["publication"]["key"] == document["key"] and document["approved_by"] == "bob"
    shown = cli.ok("status", thread, "--json").json()
    assert shown["status"] == "published" and shown["publication"]["key"] == document["key"]
    assert [(e["action"], e["door"]) for e in server.audit_of(thread)][-2:] == [
        ("approved", "langgraph"),
        ("published", "langgraph"),
    ]
    assert {t["thread_id"]: t["status"] for t in cli.ok("threads", "--json").json()}[thread] == "published"
    # An operator's delete through the server erases it as `forget` does, for every door.
    server.client("olga").threads.delete(thread)
    assert [t["thread_id"] for t in cli.ok("threads", "--json").json()] == [claimed]
    assert thread in cli.fails("status", thread).stderr


def test_forget_leaves_none_of_her_words_in_the_data_directory_nor_the_servers_files(
    servers: ExitStack, tmp_path: Path, harness: Any
):
    home = tmp_path / "home"
    home.mkdir()
    server = servers.enter_context(
        dev_server(home, {"MA_DATA_DIR": str(home / "data")}, CALLERS, made_by_cli=False)
    )
    words = {k: _marker(k) for k in ("annquestion", "annnote")}
    ann, bob = server.client("ann"), server.client("bob")
    published = ann.threads.create()["thread_id"]
    ann.runs.wait(published, "analyst", input={"ticker": "NVDA", "question": words["annquestion"]})
    request = _request(server, "bob", published)
    bob.runs.wait(
        published, "analyst", command={"resume": {"action": "approve", "draft_id": request["draft_id"]}}
    )
    waiting = ann.threads.create()["thread_id"]
    ann.runs.wait(waiting, "analyst", input={"ticker": "AAPL", "question": words["annquestion"]})
    revise = {
        "action": "revise",
        "draft_id": _request(server, "bob", waiting)["draft_id"],
        "note": words["annnote"],
    }
    bob.runs.wait(waiting, "analyst", command={"resume": revise})
    roots = [home / "data", home / "data" / "postgres", home / ".langgraph_api"]
    assert words["annquestion"] in _found(list(words.values()), *roots)  # there before

    cli = _cli(server, harness, tmp_path)
    done = cli.ok("forget", "--user", "ann", "--yes", "--json").json()
    assert sorted(done["threads"]) == sorted([published, waiting])
    assert server.client("bob").threads.get_state(published)["values"] == {}  # the saver's: gone
    assert cli.ok("threads", "--json").json() == []
    server.stop()  # a clean stop, which writes out what the server's tables hold (docs): nothing
    assert _found(list(words.values()), *roots) == {}
    assert sorted(p.name for p in (home / ".langgraph_api").iterdir() if p.stat().st_size > 16) == []


def test_a_server_that_finds_the_tables_an_earlier_one_kept_on_disk_refuses_to_start(tmp_path: Path):
    """An earlier release's server wrote its tables (threads with their values, runs with their
    input) into `.langgraph_api/`: this one would load them, beyond forget's reach. It says so."""
    home = tmp_path / "home"
    (home / ".langgraph_api").mkdir(parents=True)
    (home / ".langgraph_api" / ".langgraph_ops.pckl").write_bytes(pickle.dumps({"threads": [], "runs": []}))
    with pytest.raises(AssertionError, match="langgraph dev exited") as refused:
        with dev_server(home, {"MA_DATA_DIR": str(home / "data")}, {}, made_by_cli=False):
            pass
    assert "which forget cannot reach: stop the server, delete" in str(refused.value)


def test_a_server_killed_while_its_run_publishes_is_finished_once_by_the_command_line(
    servers: ExitStack, tmp_path: Path, harness: Any, postgres_server: str
):
    """`kill -9` of the server in the middle of `publish`: held there by a lock on the archive's table
    (the records and the checkpoints in one PostgreSQL), so the kill lands after the approval's
    checkpoint and before the publication's. `resume` finishes it: one report."""
    import psycopg

    url = new_database(postgres_server, prefix="lgk_")
    env = {"MA_DATA_DIR": str(tmp_path / "home" / "data"), "POSTGRES_URL": url, **SHARED_RECORDS}
    home = tmp_path / "home"
    home.mkdir()
    first = servers.enter_context(dev_server(home, env, CALLERS, made_by_cli=False))
    ann, bob = first.client("ann"), first.client("bob")
    thread = ann.threads.create()["thread_id"]
    ann.runs.wait(thread, "analyst", input={"ticker": "NVDA"})
    decision = {"action": "approve", "draft_id": _request(first, "bob", thread)["draft_id"], "note": "go"}
    cli = _cli(first, harness, tmp_path)
    assert cli.ok("reports", "list", "--json").json() == []  # the archive's table is there
    with psycopg.connect(url) as lock:
        lock.execute("LOCK TABLE ma_archive_reports IN ACCESS EXCLUSIVE MODE")
        bob.runs.create(thread, "analyst", command={"resume": decision})
        _wait_for(lambda: _waiting_on(url, "ma_archive_reports"), "the run to reach publish")
        first.kill()
    assert cli.ok("status", thread, "--json").json()["status"] == "approved_pending_publish"
    assert [row["status"] for row in cli.ok("threads", "--json").json()] == ["approved_pending_publish"]
    cli.ok("resume", thread)
    [document] = first.reports_of(thread)
    assert document["approved_by"] == "bob"

    second = servers.enter_context(dev_server(home, env, {}, tokens=first.tokens))
    bob = second.client("bob")
    bob.threads.create(thread_id=thread, if_exists="do_nothing", graph_id="analyst")
    assert bob.threads.get_state(thread)["values"]["publication"]["key"] == document["key"]
    assert (
        bob.runs.wait(thread, "analyst", command={"resume": decision})["publication"]["key"]
        == document["key"]
    )
    assert [d["key"] for d in second.reports_of(thread)] == [document["key"]]
    assert [e["action"] for e in second.audit_of(thread)] == ["approved", "published"]


def _waiting_on(url: str, table: str) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE %s",
            (f"%{table}%",),
        ).fetchone()
    return bool(row and row[0])


def _wait_for(done: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.05)


def test_server_runs_and_commands_at_once_each_thread_listed_once_and_published_once(
    servers: ExitStack, tmp_path: Path, harness: Any, serve: Any
):
    """Several writers at once on one store: three runs through the server and three `analyze`
    processes start threads together; the web inbox's API lists them all; then each thread is
    approved through another door (the server's threads by the command line and the web API, the
    command line's through the server), all at once. Every thread is listed once with its owner,
    and publishes one report."""
    home = tmp_path / "home"
    home.mkdir()
    server = servers.enter_context(
        dev_server(home, {"MA_DATA_DIR": str(home / "data")}, CALLERS, made_by_cli=False)
    )
    cli = _cli(server, harness, tmp_path)
    tickers = ["NVDA", "AAPL", "MSFT"]

    def through_server(ticker: str) -> str:
        ann = server.client("ann")
        thread = ann.threads.create()["thread_id"]
        ann.runs.wait(thread, "analyst", input={"ticker": ticker})
        return str(thread)

    def through_cli(ticker: str) -> str:
        return str(cli.ok("analyze", ticker, "--user", "mallory", "--json").json()["thread_id"])

    with ThreadPoolExecutor(6) as pool:
        by_server = list(pool.map(through_server, tickers))
        by_cli = [f.result() for f in [pool.submit(through_cli, t) for t in tickers]]
    listed = cli.ok("threads", "--pending", "--json").json()
    assert sorted((t["thread_id"], t["user_id"]) for t in listed) == sorted(
        [(t, "ann") for t in by_server] + [(t, "mallory") for t in by_cli]
    )
    web = serve(cli)
    api = httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {server.tokens['bob']}"})
    pending = api.get("/api/threads", params={"status": "pending"}).json()
    assert {t["thread_id"] for t in pending} == set(by_server + by_cli)

    def approve_on_server(thread: str) -> None:
        bob = server.client("bob")
        bob.threads.create(thread_id=thread, if_exists="do_nothing", graph_id="analyst")
        draft = _request(server, "bob", thread)["draft_id"]
        bob.runs.wait(thread, "analyst", command={"resume": {"action": "approve", "draft_id": draft}})

    def approve_on_the_web(thread: str) -> None:
        draft = api.get(f"/api/threads/{thread}").json()["request"]["draft_id"]
        answer = api.post(f"/api/threads/{thread}/approve", json={"draft_id": draft, "note": "web"})
        assert answer.status_code == 200, answer.text

    with ThreadPoolExecutor(6) as pool:
        done = [pool.submit(cli.ok, "approve", t, "--user", "bob") for t in by_server[:2]]
        done += [pool.submit(approve_on_the_web, by_server[2])]
        done += [pool.submit(approve_on_server, t) for t in by_cli]
        for future in done:
            future.result()
    for thread in by_server + by_cli:
        assert len(server.reports_of(thread)) == 1, thread
    statuses = {t["thread_id"]: t["status"] for t in cli.ok("threads", "--json").json()}
    assert statuses == {t: "published" for t in by_server + by_cli}
    assert [e["door"] for e in server.audit_of(by_server[2])] == ["api", "api"]
