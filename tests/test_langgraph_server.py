"""The graph as a LangGraph server (`langgraph dev`, Studio) loads it through langgraph.json: its
input schema names the state's fields, it declares no context a server could not send, and a run
given the dict context a server passes goes to the gate and, once an approval is set in the thread's
state as the README shows, publishes; the LLM analyst's tools find their data there too."""

from __future__ import annotations

import json
import os
import runpy
import typing
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from market_analyst.graph import build_graph
from market_analyst.state import AnalystState, Approval
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


def test_a_server_run_waits_at_the_gate_and_publishes_once_the_approval_is_in_its_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    graph = _server_graph(tmp_path, monkeypatch, {})
    graph.invoke({"ticker": "NVDA", "user_id": "ann"}, CONFIG, context=dict(SERVER_CONTEXT))
    paused = graph.get_state(CONFIG)
    assert paused.next == ("publish",) and paused.values["draft"]["ticker"] == "NVDA"

    approval = Approval(
        decision="approved",
        by="ann",
        at="2025-02-17T09:00:00+00:00",
        note="checked in Studio",
        draft_id=paused.values["draft"]["draft_id"],
    )
    graph.update_state(CONFIG, {"approval": approval.model_dump()}, as_node="draft_report")
    graph.invoke(None, CONFIG, context=dict(SERVER_CONTEXT))
    publication = graph.get_state(CONFIG).values["publication"]
    document = json.loads((tmp_path / "data" / "reports" / f"{publication['key']}.json").read_text())
    assert document["approved_by"] == "ann" and document["approval_note"] == "checked in Studio"


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
