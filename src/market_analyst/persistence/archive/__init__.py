"""The report archive: published reports, exactly once. `base.py` holds the rules both backends
share; `files.py` is a directory and its index, `postgres.py` the records database."""
