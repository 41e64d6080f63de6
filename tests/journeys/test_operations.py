"""Operating the stores over months, on each backend: the thread listing, history and time travel,
retention, forgetting a user, strict deserialisation and stale drafts. Prune and forget act on
every thread of a store, so on Redis they get a server of their own (the suite's is shared)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id
from tests.support.port_writers import open_sealed
from tests.support.sealed import sealed_copies
from tests.support.services import RedisServer

T0 = 1739577600  # 2025-02-15T00:00:00Z
DAY = 86_400
# Kills prune or forget right after the first thread is erased (see tests/support/crash_child.py).
AFTER_FIRST_ERASE = "call:after:market_analyst.workflow.retention:_erase:1"


@pytest.fixture(params=["postgres", "redis"])
def own_store(request: pytest.FixtureRequest, cli: Cli, tmp_path: Path) -> Iterator[Cli]:
    """The CLI on a store nobody else uses: the test's own database, or a Redis server of its own."""
    if request.param == "postgres":
        yield cli
        return
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield Cli(
            env=cli.env | {"MA_CHECKPOINTER": "redis", "REDIS_URL": server.url},
            cwd=cli.cwd,
            harness=cli.harness,
        )
    finally:
        server.stop()


def _three_threads(cli: Cli, ann: str, bob: str) -> dict[str, str]:
    """One published (ann), one rejected (bob), one waiting (ann)."""
    ids = {}
    for name, ticker, user in (
        ("approved", "MSFT", ann),
        ("rejected", "NFLX", bob),
        ("pending", "NVDA", ann),
    ):
        ids[name] = cli.ok("analyze", ticker, "--user", user, "--json").json()["thread_id"]
    cli.ok("approve", ids["approved"], "--user", "rev")
    cli.ok("reject", ids["rejected"], "--reason", "not now")
    return ids


def _listed(cli: Cli, *args: str, **kwargs: object) -> list[dict]:
    return cli.ok("threads", *args, "--json", **kwargs).json()


@both_backends
def test_threads_lists_filters_and_pages(cli: Cli):
    ann, bob = unique_id("ann"), unique_id("bob")
    ids = _three_threads(cli, ann, bob)
    mine = [ids["approved"], ids["rejected"], ids["pending"]]
    pending = [t["thread_id"] for t in _listed(cli, "--pending") if t["thread_id"] in mine]
    assert pending == [ids["pending"]]
    assert [t["thread_id"] for t in _listed(cli, "--pending", "--user", ann)] == [ids["pending"]]
    # Newest update first: the approval came after the pending thread was drafted.
    assert [t["thread_id"] for t in _listed(cli, "--user", ann)] == [ids["approved"], ids["pending"]]
    assert [t["thread_id"] for t in _listed(cli, "--user", bob, "--status", "rejected")] == [ids["rejected"]]
    assert _listed(cli, "--user", bob, "--status", "published") == []
    [row] = _listed(cli, "--user", ann, "--ticker", "nvda")
    assert set(row) == {
        "thread_id",
        "ticker",
        "user_id",
        "status",
        "created_at",
        "updated_at",
        "drafted_at",
        "draft_age_seconds",
        "revision",
        "recommendation",
    }
    assert (row["ticker"], row["user_id"], row["status"], row["revision"]) == (
        "NVDA",
        ann,
        "awaiting_approval",
        1,
    )
    paged = cli.ok("threads", "--user", ann, "--limit", "1")
    assert ids["approved"] in paged.stdout and ids["pending"] not in paged.stdout
    assert "and 1 more" in paged.stderr
    text = cli.ok("threads", "--user", ann).stdout.splitlines()
    assert text[0].split()[:5] == ["thread", "ticker", "user", "status", "draft"]
    assert "--status" in cli.fails("threads", "--status", "waiting").stderr


@both_backends
def test_history_names_every_node_and_fork_starts_a_new_thread(cli: Cli):
    original = cli.ok("analyze", "NVDA", "--json").json()
    thread = original["thread_id"]
    cli.ok("approve", thread, "--user", "rev")
    history = cli.ok("history", thread, "--json").json()
    nodes = [entry["node"] for entry in history if entry["source"] == "loop"]
    assert nodes == [
        "__start__",
        "load_profile",
        "recall",
        "fetch_market_data",
        "analyze",
        "draft_report",
        "human_review",
        "record_decision",
        "publish",
    ]
    assert history[0]["source"] == "input" and history[-1]["changes"][-1].startswith("published: ")
    assert any("decision: approved by rev" in c for e in history for c in e["changes"])
    before_analyze = next(e for e in history if e["next"] == ["analyze"])
    state_before = cli.ok("status", thread, "--json").json()

    forked = cli.ok("fork", thread, "--checkpoint", before_analyze["checkpoint_id"], "--json").json()
    assert forked["thread_id"] != thread and forked["status"] == "awaiting_approval"
    assert forked["draft"]["draft_id"] == original["draft"]["draft_id"]  # the same inputs, analysed again
    assert forked["approval"] is None and forked["publication"] is None
    approved = cli.ok("approve", forked["thread_id"], "--json").json()
    assert approved["publication"]["operation_id"] != state_before["publication"]["operation_id"]
    assert len(cli.archive_files()) == 2
    assert cli.ok("status", thread, "--json").json() == state_before  # the original is untouched
    assert (
        "has nothing left to run"
        in cli.fails("fork", thread, "--checkpoint", history[-1]["checkpoint_id"]).stderr
    )
    at_gate = next(e for e in history if e["next"] == ["human_review"])  # the draft, before any decision
    waiting = cli.ok("fork", thread, "--checkpoint", at_gate["checkpoint_id"], "--json").json()
    assert waiting["status"] == "awaiting_approval" and waiting["approval"] is None
    assert waiting["draft"]["draft_id"] == original["draft"]["draft_id"]
    assert len(cli.archive_files()) == 2  # forking at the gate publishes nothing
    assert waiting["thread_id"] in {t["thread_id"] for t in _listed(cli, "--pending", "--limit", "200")}


@pytest.mark.parametrize("cli", ["redis"], indirect=True)
def test_shallow_redis_says_it_keeps_no_history(cli: Cli):
    shallow = {"MA_REDIS_SHALLOW": "true"}
    thread = cli.ok("analyze", "NVDA", "--json", extra_env=shallow).json()["thread_id"]
    for args in (("history", thread), ("fork", thread, "--checkpoint", "x")):
        assert "this backend keeps no history" in cli.fails(*args, extra_env=shallow).stderr


def test_prune_removes_finished_threads_and_keeps_the_waiting_one(own_store: Cli):
    cli = own_store
    ids = _three_threads(cli, "ann", "bob")
    before = {t["thread_id"]: t["status"] for t in _listed(cli)}
    dry = cli.ok("prune", "--finished-before", "0d", "--dry-run")
    assert "Would remove 2" in dry.stdout and ids["pending"] not in dry.stdout
    assert {t["thread_id"]: t["status"] for t in _listed(cli)} == before  # nothing changed
    assert "--yes" in cli.fails("prune", "--finished-before", "0d").stderr  # no terminal to ask on
    done = cli.ok("prune", "--finished-before", "0d", "--yes", "--json").json()
    assert {t["thread_id"] for t in done["threads"]} == {ids["approved"], ids["rejected"]}
    assert [t["thread_id"] for t in _listed(cli)] == [ids["pending"]]
    for gone in (ids["approved"], ids["rejected"]):
        assert "unknown thread" in cli.fails("status", gone).stderr
    assert len(cli.archive_files()) == 1  # the published report stays archived
    cli.ok("approve", ids["pending"])
    assert len(cli.archive_files()) == 2
    assert "Would remove 0" in cli.ok("prune", "--finished-before", "90d", "--dry-run").stdout  # too recent
    assert "not an age" in cli.fails("prune", "--finished-before", "soon", "--yes").stderr
    too_old = cli.fails("prune", "--finished-before", "1000000d", "--yes")
    assert too_old.returncode == 2 and "before the year 1" in too_old.stderr
    assert "Traceback" not in too_old.stderr


def test_a_stale_row_corrected_by_a_listing_is_dated_by_the_thread_not_the_row(own_store: Cli):
    """A listing that finds a row behind its thread (a command killed between its checkpoint and its
    row, or a listing racing it) corrects it with the thread's own time, so a thread rejected just
    now is not pruned as if it had finished when it started."""
    from market_analyst.deps import open_checkpointer
    from market_analyst.ports import ThreadRow
    from market_analyst.settings import Settings

    cli = own_store
    old = {"SOURCE_DATE_EPOCH": str(T0)}
    thread = cli.ok("analyze", "NVDA", "--json", extra_env=old).json()["thread_id"]
    row = next(t for t in _listed(cli) if t["thread_id"] == thread)
    cli.ok("reject", thread, "--reason", "not now")
    with open_checkpointer(Settings.load(environ=cli.env, dotenv=None)) as backend:  # the row as it was
        backend.index.record(ThreadRow(**{k: v for k, v in row.items() if k != "draft_age_seconds"}))
    assert [t["status"] for t in _listed(cli) if t["thread_id"] == thread] == ["rejected"]
    assert thread not in cli.ok("prune", "--finished-before", "90d", "--dry-run").stdout
    assert "Would remove 1" in cli.ok("prune", "--finished-before", "0d", "--dry-run").stdout


def test_prune_killed_part_way_is_simply_run_again(own_store: Cli):
    cli = own_store
    ids = [_three_threads(cli, "erin", "frank") for _ in range(2)]
    finished = {i[k] for i in ids for k in ("approved", "rejected")}
    waiting = {i["pending"] for i in ids}
    reports = {p.name: p.read_bytes() for p in cli.archive_files()}
    killed = cli.harness.run(
        ["prune", "--finished-before", "0d", "--yes"], cli.env, kill_point=AFTER_FIRST_ERASE
    )
    assert killed.killed
    listed = {t["thread_id"] for t in _listed(cli)}
    assert waiting < listed and len(listed - waiting) == 3  # killed after the first of four went
    cli.ok("prune", "--finished-before", "0d", "--yes")
    assert {t["thread_id"] for t in _listed(cli)} == waiting  # every finished thread gone, none waiting
    for gone in finished:
        assert "unknown thread" in cli.fails("status", gone).stderr
    assert {p.name: p.read_bytes() for p in cli.archive_files()} == reports  # reports stay archived
    assert "Removed 0" in cli.ok("prune", "--finished-before", "0d", "--yes").stdout


def _store_of(cli: Cli, user: str) -> dict:
    """Everything the stores return for `user` (but the drafts' ages, which grow as the test runs)."""
    return {
        "threads": [
            {k: v for k, v in t.items() if k != "draft_age_seconds"} for t in _listed(cli, "--user", user)
        ],
        "reports": cli.ok("reports", "list", "--user", user, "--json").json(),
        "profile": cli.ok("profile", "show", "--user", user, "--json").json(),
    }


def test_forget_erases_one_user_everywhere_and_survives_a_kill(own_store: Cli):
    cli = own_store
    for user in ("carol", "dave"):
        cli.ok("profile", "set", "--user", user, "--risk-tolerance", "aggressive")
        for ticker in ("NVDA", "MSFT"):
            thread = cli.ok("analyze", ticker, "--user", user, "--json").json()["thread_id"]
            cli.ok("approve", thread)
        cli.ok("analyze", "TSLA", "--user", user)  # one still waiting
    daves = {
        p.name: p.read_bytes() for p in cli.archive_files() if json.loads(p.read_text())["user_id"] == "dave"
    }
    dave_before = _store_of(cli, "dave")

    # Killed part-way (after the first of carol's three threads went); the second run finishes the job.
    killed = cli.harness.run(["forget", "--user", "carol", "--yes"], cli.env, kill_point=AFTER_FIRST_ERASE)
    assert killed.killed
    halfway = _store_of(cli, "carol")
    assert len(halfway["threads"]) == 2 and len(halfway["reports"]) == 2
    assert halfway["profile"]["source"] != "default"
    report = cli.ok("forget", "--user", "carol", "--yes", "--json").json()
    assert report["user_id"] == "carol" and report["busy"] == []
    after = _store_of(cli, "carol")
    assert after["threads"] == [] and after["reports"] == [] and after["profile"]["source"] == "default"
    assert _store_of(cli, "dave") == dave_before
    assert {p.name: p.read_bytes() for p in cli.archive_files()} == daves  # byte for byte
    again = cli.ok("forget", "--user", "carol", "--yes").stdout
    assert "threads (checkpointer): 0" in again and "profile: 0" in again  # idempotent
    assert "data keys (every copy of their threads' checkpoints unreadable): 0" in again


@both_backends
def test_a_draft_older_than_the_limit_is_refused_without_allow_stale(cli: Cli):
    thread = cli.ok("analyze", "NVDA", "--json", extra_env={"SOURCE_DATE_EPOCH": str(T0)}).json()["thread_id"]
    later = {"SOURCE_DATE_EPOCH": str(T0 + 8 * DAY)}
    status = cli.ok("status", thread, "--json", extra_env=later).json()
    assert status["drafted_at"] == "2025-02-15T00:00:00+00:00"
    [row] = [t for t in _listed(cli, "--pending", extra_env=later) if t["thread_id"] == thread]
    assert row["draft_age_seconds"] == 8 * DAY
    refused = cli.fails("approve", thread, extra_env=later)
    assert (
        refused.returncode == 2 and "8 d ago" in refused.stderr and "MA_MAX_DRAFT_AGE (7 d)" in refused.stderr
    )
    assert f"market-analyst revise {thread}" in refused.stderr and "--allow-stale" in refused.stderr
    assert cli.ok("status", thread, "--json").json()["status"] == "awaiting_approval"
    cli.ok("approve", thread, extra_env=later | {"MA_MAX_DRAFT_AGE": "9d"})
    assert cli.ok("status", thread, "--json").json()["status"] == "published"
    second = cli.ok("analyze", "MSFT", "--json", extra_env={"SOURCE_DATE_EPOCH": str(T0)}).json()["thread_id"]
    cli.ok("approve", second, "--allow-stale", extra_env=later)


@both_backends
def test_a_checkpoint_holding_a_type_outside_the_allow_list_is_refused(cli: Cli):
    from langchain_core.messages import AIMessage

    from market_analyst.deps import build_deps, open_checkpointer
    from market_analyst.graph import build_graph
    from market_analyst.persistence.checkpoints.sealing import SealingSerializer
    from market_analyst.settings import Settings
    from market_analyst.workflow.views import config_for
    from tests.support.planted import Planted, PlantedTime

    user = unique_id("planted")
    thread = cli.ok("analyze", "NVDA", "--user", user, "--json").json()["thread_id"]
    other = cli.ok("analyze", "MSFT", "--user", user, "--json").json()["thread_id"]
    timed = cli.ok("analyze", "TSLA", "--user", user, "--json").json()["thread_id"]
    turns = cli.ok("analyze", "AAPL", "--user", user, "--json").json()["thread_id"]
    cli.ok("status", thread)  # ordinary runs load under strict deserialisation
    settings = Settings.load(environ=cli.env, dotenv=None)
    with open_checkpointer(settings) as backend:
        graph = build_graph(checkpointer=backend.saver)
        # Bound to the graph, the saver takes the graph's list through LangGraph's own protocol, and
        # still seals what it writes.
        bound = graph._apply_checkpointer_allowlist(backend.saver)
        assert type(bound.serde) is SealingSerializer and bound.serde.keyring is backend.saver.serde.keyring
        assert graph._serde_allowlist and bound.serde.inner._allowed_msgpack_modules >= graph._serde_allowlist
        config = {"configurable": {"thread_id": thread}}
        graph.update_state(config, {"question": Planted("rm -rf /")})  # written through the saver
        graph.update_state(config_for(timed), {"question": PlantedTime(2025, 2, 14)})
        # A type the graph's own allow-list names (the LLM analyst's turns) is stored and loads.
        graph.update_state(config_for(turns), {"messages": [AIMessage(content="an earlier turn", id="m1")]})
        build_deps(settings)
    cli.ok("status", turns)
    cli.ok("history", turns)  # every checkpoint of it read
    refused = cli.fails("status", thread)
    assert refused.returncode == 2 and "tests.support.planted.Planted" in refused.stderr
    assert "refused rather than read wrongly" in refused.stderr
    assert "tests.support.planted.Planted" in cli.fails("approve", thread).stderr
    assert "tests.support.planted.PlantedTime" in cli.fails("status", timed).stderr  # a method call
    assert "tests.support.planted.Planted" in cli.fails("history", thread).stderr  # every checkpoint read
    # one unreadable thread does not take the listings down with it
    listed = {row["thread_id"] for row in cli.ok("threads", "--user", user, "--json").json()}
    assert listed == {thread, other, timed, turns}
    from market_analyst.workflow.inbox import pending_drafts

    assert thread not in {d.thread_id for d in pending_drafts(settings)}
    assert other in {d.thread_id for d in pending_drafts(settings)}
    # and forgetting its user erases it all the same
    forgotten = cli.ok("forget", "--user", user, "--yes", "--json").json()
    assert sorted(forgotten["threads"]) == sorted([thread, other, timed, turns])
    assert "unknown thread" in cli.fails("status", thread).stderr


def test_reports_list_newest_first_with_the_count_of_the_rest(cli: Cli):
    keys = []
    for day, ticker in enumerate(("NVDA", "MSFT", "NFLX")):
        clock = {"SOURCE_DATE_EPOCH": str(T0 + day * DAY)}
        thread = cli.ok("analyze", ticker, "--json", extra_env=clock).json()["thread_id"]
        keys.append(cli.ok("approve", thread, "--json", extra_env=clock).json()["publication"]["key"])
    listed = cli.ok("reports", "list", "--limit", "2", "--json")
    assert [r["key"] for r in listed.json()] == [keys[2], keys[1]] and "and 1 more" in listed.stderr
    assert [r["key"] for r in cli.ok("reports", "list", "--json").json()] == keys[::-1]


def test_a_refusal_in_one_thread_does_not_refuse_a_read_in_another():
    """The serde hook is process-wide and the web server reads in a pool: a type refused while one
    thread reads must not make a clean read in another thread fail."""
    import threading
    from typing import TypedDict

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.serde.event_hooks import emit_serde_event
    from langgraph.graph import END, START, StateGraph

    from market_analyst.workflow.views import config_for, read_state

    class State(TypedDict):
        x: int

    builder = StateGraph(State)
    builder.add_node("step", lambda state: {"x": state["x"] + 1})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    graph.invoke({"x": 1}, config_for("clean"))
    done = threading.Event()

    def refuse_elsewhere() -> None:
        while not done.is_set():
            emit_serde_event({"kind": "msgpack_blocked", "module": "elsewhere", "name": "Refused"})

    other = threading.Thread(target=refuse_elsewhere)
    other.start()
    try:
        for _ in range(2000):
            assert read_state(graph, config_for("clean")).values == {"x": 2}
    finally:
        done.set()
        other.join()


def test_the_thread_index_keeps_every_row_when_processes_write_at_once(own_store: Cli):
    """Six `analyze` at once, then decisions and listings at once on the same threads: every thread
    keeps its own row (no row lost, no field from another thread), and the listing shows each
    thread's status as its saved state has it."""
    from market_analyst.deps import open_checkpointer
    from market_analyst.ports import ThreadQuery
    from market_analyst.settings import Settings

    cli = own_store
    tickers = ("NVDA", "MSFT", "NFLX", "TSLA", "NVDA", "MSFT")
    started = cli.harness.run_together(
        [(["analyze", t, "--user", f"writer{i}", "--json"], cli.env) for i, t in enumerate(tickers)]
    )
    ids = [outcome.check().json()["thread_id"] for outcome in started]
    decisions = [["approve", ids[i]] for i in range(3)] + [
        ["reject", ids[i], "--reason", "no"] for i in (3, 4)
    ]
    listings = [["threads", "--json"]] * 3
    for outcome in cli.harness.run_together([(argv, cli.env) for argv in decisions + listings]):
        outcome.check()

    with open_checkpointer(Settings.load(environ=cli.env, dotenv=None)) as backend:
        rows, _ = backend.index.query(ThreadQuery(limit=100))
    assert {r.thread_id: (r.user_id, r.ticker) for r in rows} == {
        ids[i]: (f"writer{i}", t) for i, t in enumerate(tickers)
    }
    want = ["published"] * 3 + ["rejected"] * 2 + ["awaiting_approval"]
    shown = {t["thread_id"]: t["status"] for t in _listed(cli)}
    assert shown == dict(zip(ids, want, strict=True))
    assert len(cli.archive_files()) == 3


def test_forget_erases_a_profile_that_no_longer_validates(cli: Cli):
    """A stored profile that fails validation (written by an older or foreign program) does not stop
    `forget`: it is counted by --dry-run and erased with the rest."""
    from market_analyst.deps import open_profiles
    from market_analyst.persistence.profiles.fields import point_id_for
    from market_analyst.settings import Settings

    user = unique_id("oldprofile")
    thread = cli.ok("analyze", "NVDA", "--user", user, "--json").json()["thread_id"]
    cli.ok("approve", thread)
    with open_profiles(Settings.load(environ=cli.env, dotenv=None)).session() as session:
        session._put([(point_id_for(user), {"user_id": user, "risk_tolerance": "reckless"})])
    assert cli.fails("profile", "show", "--user", user).returncode == 2  # unreadable
    assert cli.ok("forget", "--user", user, "--dry-run", "--json").json()["profile"] == 1
    done = cli.ok("forget", "--user", user, "--yes", "--json").json()
    assert done["profile"] == 1 and done["threads"] == [thread] and len(done["reports"]) == 1
    assert cli.ok("profile", "show", "--user", user, "--json").json()["source"] == "default"


# Where `forget` is killed: between its stores, inside the loop over threads, and at timed moments.
FORGET_KILLS = [
    "call:after:market_analyst.workflow.retention:_erase:1",
    "call:after:market_analyst.workflow.retention:_erase:2",
    "call:before:market_analyst.persistence.keys.base:Keyring.forget_thread:1",
    "call:after:market_analyst.persistence.keys.base:Keyring.forget_thread:2",
    "call:before:market_analyst.persistence.archive.files:ReportArchive.remove:1",
    "call:before:market_analyst.persistence.profiles.store:ProfileStore.delete:1",
    "call:before:market_analyst.persistence.memory.base:BaseMemoryStore.forget_user:1",
    "at:0.4",
    "at:0.8",
    "at:1.2",
]


def test_forget_killed_anywhere_ten_times_is_finished_by_running_it_again(cli: Cli):
    """Each of ten users is forgotten by a `forget` killed at one of `FORGET_KILLS`, then by a second
    run: after the kill each of their threads is whole and readable or gone, and after the second
    nothing of theirs is left (threads, data keys, reports, profile, memories), while bob's thread
    and report stay as they were."""
    from market_analyst.deps import open_keyring
    from market_analyst.settings import Settings

    bob = cli.ok("analyze", "AAPL", "--user", "bob", "--json").json()["thread_id"]
    cli.ok("approve", bob, "--user", "rev")
    bob_before = cli.ok("status", bob, "--json").json()
    keyring = open_keyring(Settings.load(environ=cli.env, dotenv=None))
    killed = 0
    for n, point in enumerate(FORGET_KILLS):
        user = unique_id(f"gone{n}")
        cli.ok("profile", "set", "--user", user, "--risk-tolerance", "moderate")
        cli.ok("remember", f"note of {user}", "--user", user, "--ticker", "NVDA")
        published = cli.ok("analyze", "NVDA", "--user", user, "--json").json()["thread_id"]
        cli.ok("approve", published, "--user", "rev")
        waiting = cli.ok("analyze", "MSFT", "--user", user, "--json").json()["thread_id"]
        outcome = cli.harness.run(["forget", "--user", user, "--yes"], cli.env, kill_point=point)
        killed += outcome.killed
        for thread in (published, waiting):
            shown = cli.run("status", thread, "--json")
            assert shown.returncode == 0 or "unknown thread" in shown.stderr, (point, shown.stderr)
        cli.ok("forget", "--user", user, "--yes")
        left = _store_of(cli, user)
        assert (left["threads"], left["reports"], left["profile"]["source"]) == ([], [], "default"), point
        assert cli.ok("memories", "list", "--user", user, "--json").json() == []
        assert not {published, waiting} & {key.thread_id for key in keyring.store.keys()}, point
    assert killed >= 7, killed  # the seven at a call always land; a timed one may come after the end
    assert cli.ok("status", bob, "--json").json() == bob_before
    assert bob in {key.thread_id for key in keyring.store.keys()}


# Where `forget --including-said-by` is killed: inside a thread's re-keying (staged, written, promoted),
# before the memories and the report go, between the audit record and the report's write, and at times.
SAID_BY_KILLS = [
    "call:after:market_analyst.persistence.keys.base:Keyring.stage:1",
    "call:before:market_analyst.persistence.keys.base:Keyring.promote:1",
    "call:after:market_analyst.persistence.keys.base:Keyring.promote:1",
    "call:before:market_analyst.persistence.memory.base:BaseMemoryStore.erase:1",
    "call:after:market_analyst.persistence.audit.files:AuditLog.append:1",
    "at:0.3",
    "at:0.7",
    "at:1.1",
    "at:1.6",
]


def test_forget_including_said_by_killed_anywhere_is_finished_by_running_it_again(cli: Cli):
    """A reviewer's words on bob's thread, taken out by a `forget --including-said-by` killed at one of
    `SAID_BY_KILLS`: after the kill bob's thread still reads (old or new key) and the audit log
    verifies; after a second run her words are nowhere in his thread, memories or report, the report
    keeps its key with one audit record of its hashes, and bob's thread is still decided on."""
    killed = 0
    for n, point in enumerate(SAID_BY_KILLS):
        reviewer, words = unique_id(f"rev{n}"), f"reviewer-words-{unique_id('w')}"
        thread = cli.ok("analyze", "NVDA", "--user", "bob", "--json").json()["thread_id"]
        cli.ok("revise", thread, "--user", reviewer, "--feedback", words)
        cli.ok("approve", thread, "--user", reviewer, "--note", f"{words} approved")
        key = cli.ok("status", thread, "--json").json()["publication"]["key"]
        before = sealed_copies(cli.env, [thread])
        outcome = cli.harness.run(
            ["forget", "--user", reviewer, "--including-said-by", "--yes"], cli.env, kill_point=point
        )
        killed += outcome.killed
        assert cli.ok("status", thread, "--json").json()["status"] == "published", point
        cli.ok("audit", "verify")
        cli.ok("forget", "--user", reviewer, "--including-said-by", "--yes")
        assert words not in cli.ok("status", thread, "--json").stdout, point
        assert words not in cli.ok("history", thread, "--json").stdout, point
        assert words not in cli.ok("reports", "show", key, "--json").stdout, point
        assert words not in cli.ok("memories", "list", "--user", "bob", "--json").stdout, point
        records = [e for e in cli.ok("audit", "list", "--json").json() if e["action"] == "redacted"]
        assert len([e for e in records if e["archive_key"] == key]) == 1, point
        cli.ok("audit", "verify")
        # The re-keying finished: one key, none staged, and what the old key sealed no longer opens.
        assert [p.name for p in (cli.data_dir / "keys").glob("*.next.json")] == [], point
        assert before and all(line.startswith("refused: ") for line in open_sealed(cli.env, before)), point
    assert killed >= 5, killed


def test_forget_including_said_by_with_a_thread_busy_erases_nothing_until_run_again(cli: Cli):
    """One of bob's threads quoting the reviewer is busy: `forget --including-said-by` says so, exits 2
    and erases nothing of the reviewer's (their profile, their memories of bob's, the audit log's
    notes), so that the run after the lease is free still finds every place their words are."""
    from tests.support.lease_holder import hold_lease

    reviewer, words = unique_id("busyrev"), f"busy-reviewer-words-{unique_id('w')}"
    cli.ok("profile", "set", "--user", reviewer, "--notes", "the reviewer's own profile")
    thread = cli.ok("analyze", "NVDA", "--user", "bob", "--json").json()["thread_id"]
    cli.ok("revise", thread, "--user", reviewer, "--feedback", words)
    busy = cli.ok("analyze", "NVDA", "--user", "bob", "--json").json()["thread_id"]  # recalls the feedback
    holder = hold_lease(cli.harness, busy, cli.env)
    try:
        refused = cli.fails("forget", "--user", reviewer, "--including-said-by", "--yes")
        assert refused.returncode == 2 and busy in refused.stderr and "run forget again" in refused.stderr
    finally:
        holder.kill()
        holder.wait()
    assert words in cli.ok("memories", "list", "--user", "bob", "--json").stdout  # the source is kept
    assert cli.ok("profile", "show", "--user", reviewer, "--json").json()["source"] == "stored"
    assert any(e.get("note") == words for e in cli.ok("audit", "list", "--json").json())
    done = cli.ok("forget", "--user", reviewer, "--including-said-by", "--yes", "--json").json()
    assert busy in done["said_by"]["threads"] and done["said_by"]["memories"] == 1
    for shown in (cli.ok("status", busy, "--json"), cli.ok("history", thread, "--json")):
        assert words not in shown.stdout


STORM = 20


def test_twenty_approvals_at_once_with_prune_and_forget_beside_them_all_exit_0(cli: Cli):
    """The storm: twenty `approve` processes at once, with `prune` (finished threads and every memory)
    and `forget` of another user running beside them, all on the embedded memory store that admits one
    process at a time. Every approval exits 0 (waiting its turn where it must), each publishes one
    report, and the audit log holds each approval once and verifies."""
    from concurrent.futures import ThreadPoolExecutor

    cli.ok("remember", "watch the export licences", "--user", "ann", "--ticker", "NVDA")
    cli.ok("remember", "prefers dividends", "--user", "dora")
    dora = [cli.ok("analyze", t, "--user", "dora", "--json").json()["thread_id"] for t in ("MSFT", "AAPL")]
    cli.ok("approve", dora[0], "--user", "rev", "--note", "fine for dora")
    tickers = ["NVDA", "MSFT", "AAPL", "AMZN", "GOOG"] * (STORM // 5)
    with ThreadPoolExecutor(3) as pool:
        threads = list(
            pool.map(lambda t: cli.ok("analyze", t, "--user", "ann", "--json").json()["thread_id"], tickers)
        )
    commands = [("approve", thread, "--user", "rev", "--note", f"ok {n}") for n, thread in enumerate(threads)]
    commands.insert(STORM // 3, ("prune", "--finished-before", "0d", "--memories-older-than", "0d", "--yes"))
    commands.insert(2 * STORM // 3, ("forget", "--user", "dora", "--yes"))
    with ThreadPoolExecutor(len(commands)) as pool:
        results = list(pool.map(lambda args: cli.run(*args, timeout=240), commands))
    failed = [
        (args[:2], r.returncode, r.stderr[-300:])
        for args, r in zip(commands, results, strict=True)
        if r.returncode
    ]
    assert not failed, failed

    entries = cli.ok("audit", "list", "--json").json()
    for thread in threads:
        actions = [e["action"] for e in entries if e.get("thread_id") == thread]
        assert actions.count("approved") == 1 and actions.count("published") == 1, (thread, actions)
    reports = cli.ok("reports", "list", "--user", "ann", "--limit", "50", "--json").json()
    assert len(reports) == STORM  # one each; pruned or not, a report stays archived
    assert "The audit log verifies" in cli.ok("audit", "verify").stdout
    assert not cli.ok("reports", "list", "--user", "dora", "--json").json()  # forgotten
