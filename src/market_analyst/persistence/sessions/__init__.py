"""Signed-in sessions of the web inbox and its failed sign-ins: `base.py` (how a session is made, keyed
and ended), `files.py` (the data directory), `postgres.py` (the records database)."""
