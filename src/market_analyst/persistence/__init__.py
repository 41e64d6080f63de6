"""Adapters that own their stores: checkpointers, the profile store, the report archive.

Reached only through the factories (`market_analyst.deps`, `persistence.checkpointers`)."""

# How long a command waits for a checkpointer server to accept a connection.
CONNECT_TIMEOUT_SECONDS = 5
