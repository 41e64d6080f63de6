"""The analyst graph for `langgraph.json` (LangGraph CLI / Studio). The server supplies the
checkpointer; a run that brings no context of its own uses the dependencies the environment
describes (built here, explicitly, opening nothing until a node uses them)."""

from market_analyst.deps import build_deps
from market_analyst.graph import build_graph
from market_analyst.settings import Settings

graph = build_graph(default_deps=build_deps(Settings.load()))
