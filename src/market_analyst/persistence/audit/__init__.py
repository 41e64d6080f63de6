"""The audit log of decisions and publications: `base.py` (the hash chain both logs keep),
`files.py` (the data directory), `postgres.py` (the records database)."""
