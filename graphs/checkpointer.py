"""The checkpointer `langgraph.json` names for LangGraph's server: the project's own saver for the
configured data directory or URL (embedded PostgreSQL by default, `POSTGRES_URL`, or Redis), with
its seal, its lease and its thread index (`market_analyst.workflow.server_saver`). A thread started
through the server is then one of the project's threads: listed by `market-analyst threads`, decided
from any door, kept across a restart of the server, and reached by `forget`."""

from market_analyst.workflow.server_saver import server_checkpointer

checkpointer = server_checkpointer
