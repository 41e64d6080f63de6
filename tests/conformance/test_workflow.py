"""The graph against each real checkpointer (PostgreSQL and Redis): pause at the gate, approve over a
new connection, reject, approve twice, unknown threads. No saver is mocked and the real graph is
compiled every time."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from market_analyst.deps import build_deps, open_audit, open_checkpointer
from market_analyst.errors import UserError
from market_analyst.graph import build_graph
from market_analyst.nodes import human_review
from market_analyst.persistence.archive.files import ReportArchive
from market_analyst.settings import Settings
from market_analyst.workflow import approve_thread, reject_thread, start_analysis, thread_status
from tests.support.backends import BACKENDS, checkpointer_env
from tests.support.cli import unique_id
from tests.support.crashkit import Harness
from tests.support.port_writers import hold_and_release_memories
from tests.support.services import RedisServer


@pytest.fixture(scope="module")
def workflow_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis of this module's own: some tests here drive the graph directly, which writes threads
    the thread index does not list, and listings on a shared server refuse such threads."""
    server = RedisServer(tmp_path_factory.mktemp("workflow-redis")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(params=BACKENDS)
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    environ = {"MA_DATA_DIR": str(tmp_path / "data")}
    if request.param == "redis":
        environ |= {"MA_CHECKPOINTER": "redis", "REDIS_URL": request.getfixturevalue("workflow_redis")}
    else:
        environ |= checkpointer_env(request, request.param)
    return Settings.load(environ=environ, dotenv=None)


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def test_run_pauses_before_publish_and_a_new_graph_over_a_new_connection_finishes_it(settings: Settings):
    thread = unique_id("t-1")
    with open_checkpointer(settings) as backend:
        graph = build_graph(checkpointer=backend.saver)
        inputs = {"ticker": "NVDA", "question": "", "user_id": "ann", "feedback": []}
        graph.invoke(inputs, _config(thread), context=build_deps(settings))
        snapshot = graph.get_state(_config(thread))
        assert snapshot.next == ("human_review",)
        [asked] = snapshot.interrupts
        assert asked.value["kind"] == "approval_request"
        assert asked.value["draft_id"] == snapshot.values["draft"]["draft_id"]
        assert asked.value["requested_by"] == "ann" and asked.value["approvals_needed"] == 1
        # Clients can render a typed form from the schema; the Redis saver stores the interrupt as JSON
        # and keeps only its value and ID, so the schema is there on PostgreSQL alone.
        if settings.checkpointer == "postgres":
            assert asked.response_schema["title"] == "Decision"
        assert snapshot.values["draft"]["data_source"] == "bundled snapshot, as of 2025-02-14"
        assert ReportArchive(settings.archive_dir).keys() == []

    # A different graph object over a different connection: the state comes from the store alone.
    view = approve_thread(settings, thread, user="bob", note="fine")
    assert view.status == "published"
    archive = ReportArchive(settings.archive_dir)
    assert archive.keys() == [view.publication["key"]]
    document = archive.get(view.publication["key"])
    assert document["approved_by"] == "bob" and document["thread_id"] == thread
    assert "bundled snapshot, as of 2025-02-14" in document["markdown"]


def test_state_holds_no_raw_price_series(settings: Settings):
    thread = unique_id("t-small")
    view = start_analysis(settings, "NVDA", thread_id=thread)
    with open_checkpointer(settings) as backend:
        graph = build_graph(checkpointer=backend.saver)
        values = graph.get_state(_config(thread)).values
    assert view.status == "awaiting_approval"
    assert len(repr(values)) < 20_000  # 6,558 prices would be far larger
    assert not any(isinstance(v, list) and len(v) > 100 for v in values["market"]["figures"].values())


def test_rejected_run_ends_with_nothing_published(settings: Settings):
    thread = unique_id("t-rej")
    start_analysis(settings, "MSFT", thread_id=thread)
    view = reject_thread(settings, thread, reason="numbers are stale", user="bob")
    assert view.status == "rejected" and view.next == []
    assert view.approval["note"] == "numbers are stale"
    assert ReportArchive(settings.archive_dir).keys() == []
    with pytest.raises(UserError, match="was rejected"):
        approve_thread(settings, thread, user="bob")
    assert ReportArchive(settings.archive_dir).keys() == []


def test_approving_twice_publishes_once_and_says_so(settings: Settings):
    thread = unique_id("t-twice")
    start_analysis(settings, "NVDA", thread_id=thread)
    first = approve_thread(settings, thread, user="bob")
    with pytest.raises(UserError, match=f"already published \\(archive key {first.publication['key']}\\)"):
        approve_thread(settings, thread, user="bob")
    assert ReportArchive(settings.archive_dir).keys() == [first.publication["key"]]


def test_unknown_thread_is_named(settings: Settings):
    nope = unique_id("nope")
    with pytest.raises(UserError, match=f"unknown thread {nope}"):
        approve_thread(settings, nope, user="bob")
    with pytest.raises(UserError, match=f"unknown thread {nope}"):
        thread_status(settings, nope)


def _back_at_the_gate(graph: Any, thread: str) -> None:
    """The thread still waits at the gate with its question, and nothing was published."""
    snapshot = graph.get_state(_config(thread))
    assert snapshot.next == ("human_review",)
    [asked] = snapshot.interrupts
    assert asked.value["kind"] == "approval_request"
    assert snapshot.values.get("publication") is None


def test_publish_refuses_without_a_recorded_approval(settings: Settings):
    thread = unique_id("t-noapp")
    start_analysis(settings, "NVDA", thread_id=thread)
    with open_checkpointer(settings) as backend:
        graph = build_graph(checkpointer=backend.saver)
        # Resumed with no decision, the gate asks again; it does not fall through.
        graph.invoke(None, _config(thread), context=build_deps(settings))
        assert graph.get_state(_config(thread)).next == ("human_review",)
        # Sent straight to publish, past the gate: publish writes nothing, and the gate still asks.
        graph.invoke(Command(goto="publish"), _config(thread), context=build_deps(settings))
        _back_at_the_gate(graph, thread)
    assert ReportArchive(settings.archive_dir).keys() == []
    assert open_audit(settings).entries(thread) == []


def test_publish_refuses_an_approval_of_another_draft(settings: Settings):
    thread = unique_id("t-other")
    start_analysis(settings, "NVDA", thread_id=thread)
    with open_checkpointer(settings) as backend:
        graph = build_graph(checkpointer=backend.saver)
        forged = {
            "decision": "approved",
            "by": "x",
            "at": "2025-01-01T00:00:00+00:00",
            "note": "",
            "draft_id": "0" * 24,
        }
        graph.update_state(_config(thread), {"approval": forged})
        graph.invoke(Command(goto="publish"), _config(thread), context=build_deps(settings))
        _back_at_the_gate(graph, thread)
        # The right draft ID and hash, and approvals listed in the state: unsealed, they prove nothing.
        values = graph.get_state(_config(thread)).values
        draft_id = values["draft"]["draft_id"]
        digest = hashlib.sha256(values["draft"]["markdown"].encode()).hexdigest()
        claimed = {
            "action": "approve",
            "draft_id": draft_id,
            "content_hash": digest,
            "by": "x",
            "at": "2025-01-01T00:00:00+00:00",
            "verified": True,
            "door": "web",
        }
        graph.update_state(
            _config(thread),
            {"approval": forged | {"draft_id": draft_id, "content_hash": digest}, "approvals": [claimed]},
        )
        graph.invoke(Command(goto="publish"), _config(thread), context=build_deps(settings))
        _back_at_the_gate(graph, thread)
    assert ReportArchive(settings.archive_dir).keys() == []
    assert open_audit(settings).entries(thread) == []


def test_same_input_gives_the_same_draft_byte_for_byte(settings: Settings):
    thread_a = unique_id("t-a")
    thread_b = unique_id("t-b")
    a = start_analysis(settings, "TSLA", user="ann", thread_id=thread_a)
    b = start_analysis(settings, "TSLA", user="ann", thread_id=thread_b)
    assert a.draft == b.draft
    assert a.draft["markdown"] == b.draft["markdown"]


def test_the_gate_is_an_interrupt_in_the_real_graph():
    graph = build_graph()
    assert list(graph.nodes) == [
        "__start__",
        "load_profile",
        "recall",
        "fetch_market_data",
        "analyze",
        "draft_report",
        "human_review",
        "record_decision",
        "publish",
        "tools",  # the LLM analyst's tool calls, between its turns of analyze
    ]
    # No static interrupt: the gate asks with interrupt() and a typed request (human_review).
    assert graph.interrupt_before_nodes == []
    source = Path(human_review.__file__).read_text()
    assert "interrupt(request.model_dump" in source and "response_schema=RESPONSE_SCHEMA" in source


def test_thread_ids_with_a_trailing_newline_are_refused():
    from market_analyst.state import validate_thread_id

    with pytest.raises(UserError, match="invalid thread ID"):
        validate_thread_id("t-1\n")


def test_the_waiting_memories_mark_keeps_the_earliest_entry_and_only_its_own_token_releases_it(
    settings: Settings,
):
    thread = unique_id("outbox")
    with open_checkpointer(settings) as backend:
        index = backend.index
        assert index.memory_hold(thread) is None
        first = index.hold_memories(thread, 3)
        second = index.hold_memories(thread, 5)  # a later hold: the earlier entry still waits
        assert index.memory_hold(thread) == (3, second) and first != second
        assert index.held_memories()[thread] == (3, second)
        assert index.release_memories(thread, first) is False  # an older hold releases nothing
        assert index.memory_hold(thread) == (3, second)
        assert index.release_memories(thread, second) is True
        assert index.memory_hold(thread) is None and thread not in index.held_memories()
        index.hold_memories(thread, 0)
        index.remove(thread)  # a thread erased takes its mark with it
        assert index.memory_hold(thread) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_several_processes_hold_and_release_waiting_memories_at_once(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, harness: Harness
):
    environ = {"MA_DATA_DIR": str(tmp_path / "data")}
    if backend == "redis":
        environ |= {"MA_CHECKPOINTER": "redis", "REDIS_URL": request.getfixturevalue("workflow_redis")}
    else:
        environ |= checkpointer_env(request, backend)
    settings = Settings.load(environ=environ, dotenv=None)
    with open_checkpointer(settings) as opened:  # what an earlier run of this test left on a shared server
        for thread in [t for t in opened.index.held_memories() if t.startswith("outbox-")]:
            opened.index.remove(thread)
    outputs = harness.call_together(hold_and_release_memories, [(environ, w) for w in range(6)])
    with open_checkpointer(settings) as opened:
        held = {t: start for t, (start, _) in opened.index.held_memories().items() if t.startswith("outbox-")}
    kept = {thread for out in outputs for thread in out["kept"]}
    assert len(kept) == 30 and set(held) == kept | {"outbox-shared"}  # nothing lost, nothing left over
    assert held["outbox-shared"] == 0  # the earliest entry any of them held
    assert all(held[t] == int(t.rsplit("-", 1)[1]) for t in kept)
