"""Market Analyst Agent: a checkpointed LangGraph analyst that waits for human approval."""

__version__ = "0.1.0"
