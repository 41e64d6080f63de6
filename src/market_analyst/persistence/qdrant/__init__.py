"""Qdrant plumbing the profile and memory stores share: a Qdrant Edge shard's crash-safe life on disk
(`edge_shard`), and the Qdrant server's client and its one-line errors (`server`)."""
