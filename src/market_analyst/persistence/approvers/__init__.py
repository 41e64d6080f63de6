"""Approvers of the web inbox and the session secret: `base.py` (the token's form, its hashing and
the rules both stores share), `files.py` (the data directory), `postgres.py` (the records database)."""
