"""Checkpoints: the savers (PostgreSQL, Redis), their thread index, leases and serde.

Opened through `market_analyst.deps.open_checkpointer`, which hands each saver its URL."""
