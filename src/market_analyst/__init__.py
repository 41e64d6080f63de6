"""Market Analyst Agent: a checkpointed LangGraph analyst that waits for human approval."""

import os

__version__ = "0.1.0"

# Checkpoints load only the types the graph state declares and LangGraph's own safe ones: LangGraph
# reads this once, when it is first imported, so it is set here, before any module of the package
# imports it. LANGGRAPH_STRICT_MSGPACK=false in the environment turns it off (for debugging).
os.environ.setdefault("LANGGRAPH_STRICT_MSGPACK", "true")
