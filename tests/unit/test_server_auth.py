"""The rules behind LangGraph's server's auth handler (`workflow/server_auth.py`), one by one; the
server itself plays them in tests/system/test_langgraph_attacks.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from market_analyst.settings import Settings
from market_analyst.workflow import server_auth as rules
from market_analyst.workflow.approvers import add_approver

ANN = rules.Caller("ann", "requester")
BOB = rules.Caller("bob", "approver")
OLGA = rules.Caller("olga", "operator")


def _run(**kwargs: object) -> dict[str, object]:
    return {"thread_id": "t", "metadata": {}, "kwargs": kwargs}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"command": {"goto": "publish"}},
        {"command": {"update": {"approval": {}}}},
        {"command": {"resume": {}, "goto": "publish"}},
        {"config": {"configurable": {"checkpoint_id": "1f0"}}},
        {"config": {"configurable": {"checkpoint_map": {"": "1f0"}}}},
        {"input": {"ticker": "NVDA", "user_id": "dan"}},
    ],
)
def test_routing_writing_forking_and_running_as_another_are_an_operators(kwargs: dict[str, object]):
    for caller in (ANN, BOB):
        assert rules.on_run(caller, _run(**kwargs)) is False
    assert rules.on_run(OLGA, _run(**kwargs)) is True


def test_a_run_is_the_callers_own_and_a_requester_runs_only_their_threads():
    value = _run(input={"ticker": "NVDA", "user_id": "", "owner": "x"})
    value["metadata"] = {"owner": "dan", "user_id": "dan"}
    assert rules.on_run(ANN, value) == {"owner": "ann"}
    assert value["kwargs"]["input"]["user_id"] == "ann"  # type: ignore[index]
    assert value["metadata"] == {"owner": "ann", "user_id": "ann"}
    assert rules.on_run(BOB, _run(command={"resume": {"action": "approve"}})) is True


def test_threads_belong_to_their_creator_and_copies_and_writes_are_repairs():
    created = {"thread_id": "t", "metadata": {"owner": "dan", "user_id": "dan"}}
    assert rules.on_thread_create(ANN, created) == {"owner": "ann"}
    assert created["metadata"] == {"owner": "ann", "user_id": "ann"}
    assert rules.on_thread_create(ANN, {"thread_id": "t"}) is False  # a copy arrives without metadata
    assert rules.on_thread_create(OLGA, {"thread_id": "t"}) is True
    assert rules.on_thread_read(ANN, {}) == {"owner": "ann"} and rules.on_thread_read(BOB, {}) is True
    for caller in (ANN, BOB):
        assert rules.on_thread_update(caller, {"thread_id": "t"}) is False  # update_state
        assert rules.on_thread_update(caller, {"thread_id": "t", "action": "rollback"}) is False
    assert rules.on_thread_update(ANN, {"thread_id": "t", "action": "interrupt"}) == {"owner": "ann"}
    assert rules.on_thread_update(OLGA, {"thread_id": "t"}) is True


def test_only_a_known_bearer_token_is_a_caller(tmp_path: Path):
    settings = Settings.load({"MA_DATA_DIR": str(tmp_path / "data")}, dotenv=None)
    token = add_approver(settings, "ann", "requester")
    assert rules.caller_of(settings, f"Bearer {token}") == ANN
    assert rules.caller_of(settings, f"bearer  {token} ") == ANN
    for header in (None, "", token, f"Basic {token}", "Bearer ", f"Bearer {token[:-1]}x", "Bearer \x00"):
        assert rules.caller_of(settings, header) is None, header
    assert rules.caller_from(ANN.to_user()) == ANN


def test_a_thread_the_project_already_has_keeps_its_owner_whoever_reaches_it_by_id():
    """Started by a command, or on the server before a restart: the thread index names its owner."""
    mallory = rules.Caller("mallory", "requester")
    reached = {"thread_id": "t", "metadata": {"owner": "bob", "user_id": "bob"}}
    assert rules.on_thread_create(BOB, reached, "ann") == {"owner": "ann"}
    assert reached["metadata"] == {"owner": "ann", "user_id": "ann"}
    assert rules.on_thread_create(ANN, {"thread_id": "t", "metadata": {}}, "ann") == {"owner": "ann"}
    assert rules.on_thread_create(mallory, {"thread_id": "t", "metadata": {}}, "ann") is False
    assert rules.on_thread_create(OLGA, {"thread_id": "t", "metadata": {}}, "ann") is True
    assert rules.on_run(mallory, _run(command={"resume": {"action": "revise"}}), "ann") is False
    assert rules.on_run(mallory, _run(input={"ticker": "NVDA"}), "ann") is False
    run = _run(command={"resume": {"action": "approve"}})
    assert rules.on_run(BOB, run, "ann") is True and run["metadata"] == {"owner": "ann", "user_id": "ann"}
    assert rules.on_run(ANN, _run(command={"resume": {}}), "ann") == {"owner": "ann"}
    # Deciding it is a reviewer's or an approver's; starting a new analysis on it is not (it would
    # make the thread theirs), nor reading it a requester's, whatever this server's record says.
    for reviewer in (BOB, rules.Caller("rita", "reviewer")):
        assert rules.on_run(reviewer, _run(input={"ticker": "AAPL"}), "ann") is False
    assert rules.on_run(ANN, _run(input={"ticker": "AAPL"}), "ann") == {"owner": "ann"}
    assert rules.on_run(OLGA, _run(input={"ticker": "AAPL", "user_id": "dan"}), "ann") is True
    assert rules.on_thread_read(mallory, {"thread_id": "t"}, "ann") == {"owner": "mallory", "user_id": "ann"}
    assert rules.on_thread_read(ANN, {"thread_id": "t"}, "ann") == {"owner": "ann"}
    assert rules.on_thread_read(BOB, {"thread_id": "t"}, "ann") is True


def test_a_run_that_would_roll_back_another_is_refused_to_everyone():
    """Rolling back deletes the cancelled run's checkpoints (a decision the audit log keeps, a
    publication the archive keeps); the savers do not offer it, and the handler refuses it first."""
    for caller in (ANN, BOB, OLGA):
        run = _run(command={"resume": {"action": "approve"}})
        assert rules.on_run(caller, run | {"multitask_strategy": "rollback"}) is False
        assert rules.on_run(caller, run | {"multitask_strategy": "enqueue"}) is not False
