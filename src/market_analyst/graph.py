"""The one factory of the analyst graph."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from market_analyst.deps import Deps
from market_analyst.nodes.analyze import analyze
from market_analyst.nodes.draft_report import draft_report
from market_analyst.nodes.fetch_market_data import fetch_market_data
from market_analyst.nodes.load_profile import load_profile
from market_analyst.nodes.publish import publish
from market_analyst.settings import Settings
from market_analyst.state import AnalystState

NODES = ("load_profile", "fetch_market_data", "analyze", "draft_report", "publish")
GATE = "publish"


def build_graph(
    *, checkpointer: BaseCheckpointSaver[Any] | None = None, deps: Deps | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile `load_profile → fetch_market_data → analyze → draft_report → publish`, interrupting
    before `publish` so that a person decides. `deps` defaults to what the environment describes."""
    deps = deps or Deps.from_settings(Settings.load())

    def load_profile_node(state: AnalystState) -> dict[str, Any]:
        return load_profile(state, profiles=deps.profiles)

    def fetch_market_data_node(state: AnalystState) -> dict[str, Any]:
        return fetch_market_data(state, market_data=deps.market_data)

    def analyze_node(state: AnalystState) -> dict[str, Any]:
        return analyze(state, analyst=deps.analyst)

    def publish_node(state: AnalystState, config: RunnableConfig) -> dict[str, Any]:
        return publish(state, config, archive=deps.archive)

    builder = StateGraph(AnalystState)
    builder.add_node("load_profile", load_profile_node)
    builder.add_node("fetch_market_data", fetch_market_data_node)
    builder.add_node("analyze", analyze_node)
    builder.add_node("draft_report", draft_report)
    builder.add_node("publish", publish_node)
    builder.add_edge(START, "load_profile")
    builder.add_edge("load_profile", "fetch_market_data")
    builder.add_edge("fetch_market_data", "analyze")
    builder.add_edge("analyze", "draft_report")
    builder.add_edge("draft_report", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=checkpointer, interrupt_before=[GATE])


def mermaid() -> str:
    """The Mermaid drawing of the graph, as `graphs/analyst.mmd` stores it."""
    return str(
        build_graph(deps=Deps.from_settings(Settings.load(environ={}, dotenv=None)))
        .get_graph()
        .draw_mermaid()
    )
