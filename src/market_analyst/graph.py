"""The one factory of the analyst graph.

Nodes get what they use (market data, the analyst, profiles, the archive) as LangGraph's runtime
context, a `Deps` passed with each run (`graph.stream(..., context=deps)`), so the graph itself
holds no client and reads no setting. A graph built with `default_deps` (the LangGraph server's
export in `graphs/analyst.py`) uses those when a run brings no Deps of its own, as a server's runs
never do.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from market_analyst.context import Deps
from market_analyst.nodes.agent import next_step
from market_analyst.nodes.analyze import analyze
from market_analyst.nodes.draft_report import draft_report
from market_analyst.nodes.fetch_market_data import fetch_market_data
from market_analyst.nodes.human_review import human_review
from market_analyst.nodes.load_profile import load_profile
from market_analyst.nodes.publish import publish
from market_analyst.nodes.recall import recall
from market_analyst.nodes.record_decision import record_decision
from market_analyst.nodes.tools import tool_node
from market_analyst.state import AnalystState

# The main line, in order; `tools` runs only for the LLM analyst, between its turns of `analyze`.
NODES = (
    "load_profile",
    "recall",
    "fetch_market_data",
    "analyze",
    "draft_report",
    "human_review",
    "record_decision",
    "publish",
)
TOOLS = "tools"
# The node that asks a person (an `interrupt()`), and the one a decision reaches it through.
GATE = "human_review"
# Where the gate of earlier versions stopped a run: a static interrupt before `publish`, with no request.
LEGACY_GATE = "publish"
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "load_profile": load_profile,
    "recall": recall,
    "fetch_market_data": fetch_market_data,
    "analyze": analyze,
    "draft_report": draft_report,
    "human_review": human_review,
    "record_decision": record_decision,
    "publish": publish,
}
# Where a node that routes by `Command(goto=...)` can send a run, for the drawing and for LangGraph: the
# the gate back to itself (an answer it did not take: it asks again), `record_decision` where the
# decision leads (back to the gate when the state's decision proves nothing).
_ROUTES: dict[str, tuple[str, ...]] = {
    "human_review": ("human_review",),
    "record_decision": ("human_review", "analyze", "publish", END),
    "publish": ("human_review", END),
}

# `wrapper(node_name, node_function)` returns the function the graph runs instead. A wrapper must
# keep the node's signature (`functools.wraps` does): LangGraph injects `runtime` and `config` by it.
NodeWrapper = Callable[[str, Callable[..., Any]], Callable[..., Any]]
_PROCESS_WRAPPERS: list[NodeWrapper] = []


_COMPILED: list[CompiledStateGraph[Any, Any, Any, Any]] = []


def add_node_wrapper(wrapper: NodeWrapper) -> None:
    """Instrument every graph this process builds from now on (tracing, or the crash harness that
    kills a process at a node boundary). Wrappers apply in the order they were added."""
    _PROCESS_WRAPPERS.append(wrapper)
    _COMPILED.clear()


def graph_over(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The graph over `checkpointer`, as `build_graph` compiles it: compiled once per process and
    copied with each command's saver, so a server's requests do not compile it again each time."""
    if not _COMPILED:
        _COMPILED.append(build_graph())
    compiled = _COMPILED[0]
    graph = compiled.copy(update={"checkpointer": checkpointer})
    # `copy` passes each attribute to the constructor, which does not take this one: kept as compiled.
    graph._serde_allowlist = getattr(compiled, "_serde_allowlist", None)
    return graph


def _with_default_context(node: Callable[..., Any], deps: Deps) -> Callable[..., Any]:
    # A LangGraph server passes each run a dict context (the request's configurable values): only a
    # Deps is one, so anything else means the run brought none.
    @functools.wraps(node)
    def run(*args: Any, runtime: Runtime[Deps], **kwargs: Any) -> Any:
        if not isinstance(runtime.context, Deps):
            runtime = runtime.override(context=deps)
        return node(*args, runtime=runtime, **kwargs)

    return run


def build_graph(
    *,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    default_deps: Deps | None = None,
    wrap_node: NodeWrapper | None = None,
    input_schema: type[Any] | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile `load_profile → recall → fetch_market_data → analyze → draft_report → human_review →
    record_decision → publish`; `human_review` interrupts the run until a person decides.
    `input_schema` narrows what a run's input may set (LangGraph's server: `state.ServerInput`);
    the command line starts threads with the whole state's keys."""
    # No `context_schema`: Deps holds live clients, which no caller can send as JSON and which have no
    # JSON Schema; declared, it made a LangGraph server build Deps from its dict context (a TypeError
    # before any node ran) and fail its /assistants/{id}/schemas endpoint, which Studio reads.
    builder = StateGraph(AnalystState, input_schema=input_schema)
    wrappers = [*_PROCESS_WRAPPERS, *([wrap_node] if wrap_node else [])]
    for name in NODES:
        node = _FUNCTIONS[name]
        if default_deps is not None and "runtime" in _parameters(node):
            node = _with_default_context(node, default_deps)
        for wrapper in wrappers:
            node = wrapper(name, node)
        builder.add_node(name, node, destinations=_ROUTES.get(name))
    builder.add_node(TOOLS, tool_node(default_deps))
    builder.add_edge(START, "load_profile")
    builder.add_edge("load_profile", "recall")
    builder.add_edge("recall", "fetch_market_data")
    builder.add_edge("fetch_market_data", "analyze")
    builder.add_conditional_edges("analyze", next_step, ["draft_report", TOOLS, "analyze"])
    builder.add_edge(TOOLS, "analyze")
    builder.add_edge("draft_report", GATE)
    builder.add_edge(GATE, "record_decision")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=checkpointer)


def _parameters(node: Callable[..., Any]) -> set[str]:
    return set(inspect.signature(node).parameters)


def mermaid() -> str:
    """The Mermaid drawing of the graph, as `graphs/analyst.mmd` stores it."""
    return str(build_graph().get_graph().draw_mermaid())
