"""Adapters that own their stores, one subpackage per store with its backends side by side:
checkpoints, profiles, archive, approvals.

Reached only through the factory, `market_analyst.deps`."""

# How long a command waits for a checkpointer server to accept a connection.
CONNECT_TIMEOUT_SECONDS = 5
