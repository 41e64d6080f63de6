"""Adapters that own their stores: checkpointers, the profile store, the report archive, leases."""
