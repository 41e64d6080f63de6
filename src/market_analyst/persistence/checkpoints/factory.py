"""The checkpointer factory: PostgreSQL (embedded by default, or `POSTGRES_URL`) or Redis (`REDIS_URL`).

`open_checkpointer(settings)` yields a `ports.CheckpointBackend`: a ready saver (`setup()` done), the
per-thread lease that belongs to the same backend, and the errors that mean its server went away.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from market_analyst.ports import CheckpointBackend
from market_analyst.settings import Settings


@contextmanager
def open_checkpointer(settings: Settings) -> Iterator[CheckpointBackend]:
    """Yield the ready backend that `settings.checkpointer` selects, and close it afterwards."""
    if settings.checkpointer == "postgres":
        from market_analyst.persistence.checkpoints.postgres import open_postgres

        with open_postgres(settings) as postgres:
            yield postgres
    else:
        from market_analyst.persistence.checkpoints.redis import open_redis

        with open_redis(settings) as redis:
            yield redis


def stop_embedded_server(settings: Settings) -> bool:
    """Stop the embedded PostgreSQL of the data directory if one runs; True if one was stopped."""
    from market_analyst.services import stop_embedded_postgres

    return stop_embedded_postgres(settings.postgres_dir)


def embedded_server(pgdata: Path) -> dict[str, Any] | None:
    """The embedded server's PID and socket from its lock file, and whether that process is alive;
    None when it has no lock file (it is not running)."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), lines[3].strip(), lines[4].strip()
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    except PermissionError:  # alive, but another user's (the server's user, when run as root)
        alive = True
    return {"pid": pid, "socket": f"{socket_dir}/.s.PGSQL.{port}", "alive": alive}
