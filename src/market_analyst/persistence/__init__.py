"""Adapters that own their stores, one subpackage per store with its backends side by side:
checkpoints, profiles, memory, archive, approvers, audit, sessions. Under each store of our own, a
`base.py` holds the rules its backends share (the checkpointer's savers are LangGraph's).

`postgres/` is the plumbing the PostgreSQL stores share: the embedded server, where a server is and
how a connection is opened, and the records database's numbered migrations. `migrate.py` is the one
copy path from the data directory's files into the records database.

`qdrant/` is the plumbing the Qdrant stores (profiles, memory) share: a Qdrant Edge shard's
crash-safe life on disk (load, build beside, install, settle) and the Qdrant server's client with its
one-line errors.

An adapter takes a URL, a path, a client factory or a `postgres.server.PostgresServer`, never
the settings: the factory, `market_analyst.deps`, reads them, and is the only way in."""

# How long a command waits for a checkpointer server to accept a connection.
CONNECT_TIMEOUT_SECONDS = 5
