"""The graph as a LangGraph server (`langgraph dev`, Studio) loads it through langgraph.json: its
input schema names the state's fields, it declares no context a server could not send, and a run
given the dict context a server passes goes to the gate, which asks with a typed request in the
thread's state, and a `Command(resume=...)` decision publishes through the same rules as every other
door; the LLM analyst's tools find their data there too."""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import typing
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from market_analyst.graph import build_graph
from market_analyst.state import SCHEMA_VERSION, AnalystState
from tests.support import REPO
from tests.support.chat_server import ChatServer
from tests.support.cli import clean_environ

# What a LangGraph server passes each run as its context: the request's configurable values.
SERVER_CONTEXT = {"thread_id": "studio-1", "graph_id": "analyst", "langgraph_auth_user_id": ""}
CONFIG = {"configurable": {"thread_id": "studio-1"}}


def test_the_input_schema_offers_the_ticker_and_the_question_only_on_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # The command line's graph takes the whole state (it starts threads with their schema and time).
    assert set(build_graph().get_input_jsonschema()["properties"]) == set(typing.get_type_hints(AnalystState))
    graph = _server_graph(tmp_path, monkeypatch, {})
    schema = graph.get_input_jsonschema()
    assert set(schema["properties"]) == {"ticker", "question", "user_id"}
    assert schema["required"] == ["ticker"] and schema["properties"]["ticker"]["type"] == "string"
    # The server builds this for /assistants/{id}/schemas (Studio): a schema of live clients broke it.
    assert graph.get_context_jsonschema() is None
    # What else an input says is not the caller's to set: dropped, and the gate still stands.
    claimed = {"approval": {"decision": "approved"}, "publication": {"key": "x"}}
    graph.invoke({"ticker": "NVDA", "user_id": "ann", **claimed}, CONFIG, context=dict(SERVER_CONTEXT))
    state = graph.get_state(CONFIG)
    assert state.next == ("human_review",) and state.values.get("publication") is None
    assert state.values["schema_version"] == SCHEMA_VERSION and state.values["started_at"]


def test_langgraph_api_files_are_ignored():
    assert ".langgraph_api/" in (REPO / ".gitignore").read_text().splitlines()


def _server_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Any:
    """graphs/analyst.py as the server imports it, with the environment `env` adds, and the in-memory
    checkpointer `langgraph dev` gives it."""
    for name in set(os.environ) - set(clean_environ()):
        monkeypatch.delenv(name)
    for name, value in ({"MA_DATA_DIR": str(tmp_path / "data")} | env).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # no .env here
    graph = runpy.run_path(str(REPO / "graphs" / "analyst.py"))["analyst"]
    return graph.copy(update={"checkpointer": InMemorySaver()})


def _as(user: str | None) -> dict[str, Any]:
    """The run configuration LangGraph's server gives a run its auth handler authenticated `user` for."""
    configurable: dict[str, Any] = {"thread_id": "studio-1"}
    if user is not None:
        configurable["langgraph_auth_user"] = {"identity": user, "permissions": ["approver"]}
    return {"configurable": configurable}


def test_a_server_run_asks_with_a_typed_request_and_a_resume_publishes_through_the_same_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    graph = _server_graph(tmp_path, monkeypatch, {"MA_APPROVERS": "ann,bob,mallory"})
    graph.invoke({"ticker": "NVDA", "user_id": "ann"}, CONFIG, context=dict(SERVER_CONTEXT))
    paused = graph.get_state(CONFIG)
    assert paused.next == ("human_review",) and paused.values["draft"]["ticker"] == "NVDA"
    # What LangGraph's server, Studio and Agent Inbox show: the request, and the schema of an answer.
    [asked] = paused.interrupts
    draft = paused.values["draft"]
    digest = hashlib.sha256(draft["markdown"].encode()).hexdigest()
    assert asked.value == {
        "kind": "approval_request",
        "thread_id": "studio-1",
        "ticker": "NVDA",
        "draft_id": draft["draft_id"],
        "revision": 1,
        "content_hash": digest,
        "headline": draft["headline"],
        "requested_by": "ann",
        "allowed_actions": ["approve", "reject", "revise"],
        "approvals": [],
        "approvals_needed": 1,
        "drafted_at": paused.values["drafted_at"],
        "due_at": None,  # no MA_DECISION_DUE here, nor MA_EXPIRE_AFTER
        "expires_at": None,
        "expired_at": None,
        "refused": None,
        "action_request": {
            "action": "Approve report",
            "args": {"draft_id": draft["draft_id"], "content_hash": digest, "headline": draft["headline"]},
        },
        "config": {"allow_ignore": False, "allow_respond": True, "allow_edit": False, "allow_accept": True},
        "description": draft["markdown"],
    }
    assert asked.response_schema["title"] == "Decision"

    def resume(user: str | None, decision: Any) -> Any:
        graph.invoke(Command(resume=decision), _as(user), context=dict(SERVER_CONTEXT))
        return graph.get_state(CONFIG)

    # Refused by the same rule as every other door, and asked again with the reason: nothing is
    # recorded, the thread still waits. Who decides is the authenticated caller, never a typed name.
    for user, bad, why in (
        (None, {"action": "approve", "draft_id": draft["draft_id"]}, "no authenticated caller"),
        ("bob", {"action": "approve", "draft_id": "0" * 24}, "is not the current draft"),
        ("bob", {"action": "approve", "draft_id": draft["draft_id"], "by": "ceo"}, "but 'bob' is signed in"),
        ("ann", {"action": "approve", "draft_id": draft["draft_id"]}, "separation of duties"),
        ("bob", {"action": "publish", "draft_id": draft["draft_id"]}, "action"),
        ("bob", {"action": "approve", "draft_id": draft["draft_id"], "at": "1999-01-01T00:00:00"}, "at"),
        ("bob", {"action": "approve", "draft_id": draft["draft_id"], "verified": True}, "verified"),
        ("bob", {"action": "reject", "draft_id": draft["draft_id"]}, "needs a reason"),
        ("bob", [{"type": "ignore", "args": None}], "does not take 'ignore'"),
        ("bob", "approve", "not a decision"),
    ):
        again = resume(user, bad)
        assert again.next == ("human_review",) and again.values.get("approval") is None, bad
        [asked_again] = again.interrupts
        assert why in asked_again.value["refused"], (bad, asked_again.value["refused"])
        assert asked_again.value["draft_id"] == draft["draft_id"]
    assert not (tmp_path / "data" / "reports").exists() or not any(
        (tmp_path / "data" / "reports").glob("*.json")
    )
    assert not (tmp_path / "data" / "audit" / "audit.jsonl").exists()

    # The authenticated approver's decision is recorded in their name, verified, through this door.
    approve = {"action": "approve", "draft_id": draft["draft_id"], "note": "checked in Studio"}
    state = resume("bob", approve).values
    assert state["approval"]["by"] == "bob" and state["approval"]["verified"] is True
    assert state["approval"]["door"] == "langgraph"
    document = json.loads((tmp_path / "data" / "reports" / f"{state['publication']['key']}.json").read_text())
    assert document["approved_by"] == "bob" and document["approval_note"] == "checked in Studio"
    assert document["approval_verified"] is True
    audit = [
        json.loads(line) for line in (tmp_path / "data" / "audit" / "audit.jsonl").read_text().splitlines()
    ]
    assert [(e["action"], e["door"], e["verified"], e["personal"]["actor"]) for e in audit] == [
        ("approved", "langgraph", True, "bob"),
        ("published", "langgraph", True, "bob"),
    ]
    # The thread has finished: a second resume of the same decision publishes nothing new.
    resume("bob", {"action": "approve", "draft_id": draft["draft_id"]})
    assert len(list((tmp_path / "data" / "reports").glob("*.json"))) == 1


def test_a_server_client_cannot_expire_a_draft_nor_approve_one_past_its_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import time

    graph = _server_graph(tmp_path, monkeypatch, {"MA_EXPIRE_AFTER": "1s"})
    graph.invoke({"ticker": "NVDA", "user_id": "ann"}, CONFIG, context=dict(SERVER_CONTEXT))
    draft_id = graph.get_state(CONFIG).values["draft"]["draft_id"]
    time.sleep(1.1)  # past the expiry, by the real clock the gate reads

    def resume(decision: Any) -> Any:
        graph.invoke(Command(resume=decision), _as("bob"), context=dict(SERVER_CONTEXT))
        return graph.get_state(CONFIG)

    # An expiry is the deadline worker's alone: a client that sends one (with a note, even) records
    # nothing, and the thread still waits.
    for sent in (
        {"action": "expire", "draft_id": draft_id},
        {"action": "expire", "draft_id": draft_id, "note": "x"},
    ):
        again = resume(sent)
        [asked] = again.interrupts
        assert again.next == ("human_review",) and "action" in asked.value["refused"], asked.value["refused"]
        assert again.values.get("expired") is None
    refused = resume({"action": "approve", "draft_id": draft_id})
    assert (
        "expired at" in refused.interrupts[0].value["refused"] and refused.values.get("publication") is None
    )
    assert not (tmp_path / "data" / "audit" / "audit.jsonl").exists()  # nothing was recorded
    revised = resume({"action": "revise", "draft_id": draft_id, "note": "fresh data"})
    assert revised.values["draft"]["revision"] == 2 and revised.next == ("human_review",)


# langgraph's tool runtime is typed with no context, so pydantic warns when it serialises a run's Deps;
# the command line's runs do the same, where warnings are hidden without --debug.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_a_server_run_of_the_llm_analyst_gives_its_tools_the_data(tmp_path: Path, monkeypatch):
    answer = {
        "recommendation": "hold",
        "confidence": 0.6,
        "summary": "NVDA is in an up trend.",
        "risk_factors": ["volatility is high for this profile"],
    }
    script = [{"call": "figures_over_window", "arguments": {"window": "3M"}}, {"answer": answer}]
    with ChatServer(script) as server:
        graph = _server_graph(tmp_path, monkeypatch, server.env())
        graph.invoke({"ticker": "NVDA", "user_id": "ann"}, CONFIG, context=dict(SERVER_CONTEXT))
        [result] = [m for m in server.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert json.loads(result["content"])["return_pct"] == -6.3594  # the tool read the bundled prices
    assert graph.get_state(CONFIG).values["draft"]["analyst"]["kind"] == "llm"


def test_an_approval_binds_the_whole_draft_and_a_bad_answer_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    graph = _server_graph(tmp_path, monkeypatch, {"MA_REQUIRED_APPROVALS": "2"})
    graph.invoke({"ticker": "NVDA", "user_id": "ann"}, CONFIG, context=dict(SERVER_CONTEXT))
    draft = graph.get_state(CONFIG).values["draft"]

    def resume(user: str, answer: Any) -> dict[str, Any]:
        graph.invoke(Command(resume=answer), _as(user), context=dict(SERVER_CONTEXT))
        [asked] = graph.get_state(CONFIG).interrupts
        return dict(asked.value)

    # Malformed where only the decision's own model can tell: asked again, and still answerable.
    for bad in ({"options": {"horizon": "forever"}}, {"draft_id": "d" * 100}):
        asked = resume("bob", {"action": "revise", "draft_id": draft["draft_id"]} | bad)
        assert asked["refused"] and asked["revision"] == 1, asked["refused"]
    approve = {"action": "approve", "draft_id": draft["draft_id"]}
    assert [a["by"] for a in resume("bob", approve)["approvals"]] == ["bob"]
    # A sealed approval read from the state and sent back as an answer is not the caller's decision.
    [sealed] = graph.get_state(CONFIG).values["approvals"]
    assert "seal is not valid" in resume("carol", sealed | {"by": "bob"})["refused"]
    # The structured report beside the same Markdown changed (as a state writer could): bob's approval
    # no longer counts, so carol's alone publishes nothing.
    changed = dict(draft, recommendation="sell", headline="FORGED")
    graph.update_state(CONFIG, {"draft": changed}, as_node="draft_report")
    graph.invoke(None, CONFIG, context=dict(SERVER_CONTEXT))
    assert [a["by"] for a in resume("carol", approve)["approvals"]] == ["carol"]
    assert graph.get_state(CONFIG).values.get("publication") is None
    reports = tmp_path / "data" / "reports"
    assert not reports.exists() or not any(reports.glob("*.json"))
