"""Checkpoints: the savers (PostgreSQL, Redis), their thread index, leases and serde.

Opened through `checkpoints.factory.open_checkpointer`."""
