"""The analyst graph for `langgraph.json` (LangGraph CLI / Studio). The server supplies the
checkpointer; a run that brings no context of its own uses the dependencies the environment
describes (built here, explicitly, opening nothing until a node uses them). A run's input may set
the ticker, the question and (an operator's) user_id, nothing else of the state.

The server runs no command after the graph to copy the memory outbox into the memory store, so the
nodes write each memory at once as well (`Deps.write_memories`)."""

import dataclasses

from market_analyst.deps import build_deps
from market_analyst.graph import build_graph
from market_analyst.settings import Settings
from market_analyst.state import ServerInput

graph = build_graph(
    default_deps=dataclasses.replace(build_deps(Settings.load()), write_memories=True),
    input_schema=ServerInput,
)
