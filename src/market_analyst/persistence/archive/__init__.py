"""The report archive: published reports, exactly once (a directory and its index)."""
