"""The PostgreSQL plumbing the stores share: the embedded server in the data directory
(`embedded.py`), where a server is and how a connection to it is opened and a schema set up under
an advisory lock (`connect.py`), and the records database's numbered migrations and per-operation
connections (`records.py`).

The checkpointer (`checkpoints/postgres.py`) and every records store (`archive/`, `approvers/`,
`audit/`, `sessions/`) connect through here; none of them reads `Settings`."""
