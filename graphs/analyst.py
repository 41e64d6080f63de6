"""The analyst graph for `langgraph.json` (LangGraph CLI / Studio). The server supplies the
checkpointer; a run that brings no context of its own uses the dependencies the environment
describes (built here, explicitly, opening nothing until a node uses them). A run's input may set
the ticker, the question and (an operator's) user_id, nothing else of the state."""

from market_analyst.deps import build_deps
from market_analyst.graph import build_graph
from market_analyst.settings import Settings
from market_analyst.state import ServerInput

graph = build_graph(default_deps=build_deps(Settings.load()), input_schema=ServerInput)
