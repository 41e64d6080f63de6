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
from pydantic import ValidationError

from market_analyst.graph import build_graph
from market_analyst.state import AnalystState
from tests.support import REPO
from tests.support.chat_server import ChatServer
from tests.support.cli import clean_environ

# What a LangGraph server passes each run as its context: the request's configurable values.
SERVER_CONTEXT = {"thread_id": "studio-1", "graph_id": "analyst", "langgraph_auth_user_id": ""}
CONFIG = {"configurable": {"thread_id": "studio-1"}}


def test_the_input_schema_names_the_state_fields():
    graph = build_graph()
    schema = graph.get_input_jsonschema()
    assert set(schema["properties"]) == set(typing.get_type_hints(AnalystState))
    assert schema["properties"]["ticker"]["type"] == "string"
    # The server builds this for /assistants/{id}/schemas (Studio): a schema of live clients broke it.
    assert graph.get_context_jsonschema() is None


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
    graph = runpy.run_path(str(REPO / "graphs" / "analyst.py"))["graph"]
    return graph.copy(update={"checkpointer": InMemorySaver()})


def test_a_server_run_asks_with_a_typed_request_and_a_resume_publishes_through_the_same_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    graph = _server_graph(tmp_path, monkeypatch, {"MA_APPROVERS": "ann,bob"})
    graph.invoke({"ticker": "NVDA", "user_id": "ann"}, CONFIG, context=dict(SERVER_CONTEXT))
    paused = graph.get_state(CONFIG)
    assert paused.next == ("human_review",) and paused.values["draft"]["ticker"] == "NVDA"
    # What LangGraph's server, Studio and inbox tools show: the request, and the schema of an answer.
    [asked] = paused.interrupts
    draft = paused.values["draft"]
    assert asked.value == {
        "kind": "approval_request",
        "thread_id": "studio-1",
        "ticker": "NVDA",
        "draft_id": draft["draft_id"],
        "revision": 1,
        "content_hash": hashlib.sha256(draft["markdown"].encode()).hexdigest(),
        "headline": draft["headline"],
        "requested_by": "ann",
        "allowed_actions": ["approve", "reject", "revise"],
        "approvals": [],
        "approvals_needed": 1,
        "drafted_at": paused.values["drafted_at"],
    }
    assert set(asked.response_schema["required"]) == {"action", "draft_id", "by"}

    def resume(**decision: Any) -> None:
        graph.invoke(Command(resume=decision), CONFIG, context=dict(SERVER_CONTEXT))

    # Refused by the same rule as every other door, and nothing changes: a draft that is not the one
    # asked about, someone MA_APPROVERS leaves out, a decision that is not one.
    for bad, why in (
        ({"action": "approve", "draft_id": "0" * 24, "by": "bob"}, "is not the current draft"),
        ({"action": "approve", "draft_id": draft["draft_id"], "by": "mallory"}, "MA_APPROVERS allows"),
        ({"action": "publish", "draft_id": draft["draft_id"], "by": "bob"}, "action"),
    ):
        with pytest.raises(ValidationError, match=why):
            resume(**bad)
        again = graph.get_state(CONFIG)
        assert again.next == ("human_review",) and again.values.get("approval") is None
    assert not (tmp_path / "data" / "reports").exists() or not any(
        (tmp_path / "data" / "reports").glob("*.json")
    )

    # A client cannot claim a verified identity: the server's decisions are recorded as unverified.
    resume(action="approve", draft_id=draft["draft_id"], by="bob", note="checked in Studio", verified=True)
    state = graph.get_state(CONFIG).values
    assert state["approval"]["verified"] is False and state["approval"]["door"] == "langgraph"
    document = json.loads((tmp_path / "data" / "reports" / f"{state['publication']['key']}.json").read_text())
    assert document["approved_by"] == "bob" and document["approval_note"] == "checked in Studio"
    assert document["approval_verified"] is False
    audit = [
        json.loads(line) for line in (tmp_path / "data" / "audit" / "audit.jsonl").read_text().splitlines()
    ]
    assert [(e["action"], e["door"], e["verified"]) for e in audit] == [
        ("approved", "langgraph", False),
        ("published", "langgraph", False),
    ]
    # The thread has finished: a second resume of the same decision publishes nothing new.
    resume(action="approve", draft_id=draft["draft_id"], by="bob")
    assert len(list((tmp_path / "data" / "reports").glob("*.json"))) == 1


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
