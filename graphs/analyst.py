"""The analyst graph for `langgraph.json` (LangGraph CLI / Studio); the server supplies the checkpointer."""

from market_analyst.graph import build_graph

graph = build_graph()
