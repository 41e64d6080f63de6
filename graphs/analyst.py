"""The analyst graph for `langgraph.json` (LangGraph CLI / Studio). The server supplies the
checkpointer (the project's own: `graphs/checkpointer.py`); a run that brings no context of its own
uses the dependencies the environment describes (built here, explicitly, opening nothing until a
node uses them). A run's input may set the ticker, the question and (an operator's) user_id, nothing
else of the state.

`graph` is the factory the server enters around each use of the graph: for a run it executes, it
holds the thread's lease meanwhile, so a run on the server and a command on the same thread never
write at once (the later one is refused, `ThreadBusy`). `analyst` is the compiled graph it yields.

The server runs no command after the graph to copy the memory outbox into the memory store, so the
nodes write each memory at once as well (`Deps.write_memories`)."""

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from market_analyst.deps import build_deps
from market_analyst.graph import build_graph
from market_analyst.settings import Settings
from market_analyst.state import ServerInput
from market_analyst.workflow.server_saver import thread_lease

analyst = build_graph(
    default_deps=dataclasses.replace(build_deps(Settings.load()), write_memories=True),
    input_schema=ServerInput,
)


@asynccontextmanager
async def graph(config: Any) -> AsyncIterator[Any]:
    """The compiled graph; around a run the server executes, the thread's lease."""
    configurable = (config or {}).get("configurable") or {}
    if not configurable.get("__is_for_execution__"):
        yield analyst
        return
    async with thread_lease(configurable.get("thread_id")):
        yield analyst
