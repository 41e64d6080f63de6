"""The checkpointer factory: PostgreSQL (embedded by default, or `POSTGRES_URL`) or Redis (`REDIS_URL`).

`open_checkpointer(settings)` yields a `ports.CheckpointBackend`: a ready saver (`setup()` done), the
per-thread lease that belongs to the same backend, and the errors that mean its server went away.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from market_analyst.ports import CheckpointBackend
from market_analyst.settings import Settings


@contextmanager
def open_checkpointer(settings: Settings) -> Iterator[CheckpointBackend]:
    """Yield the ready backend that `settings.checkpointer` selects, and close it afterwards."""
    if settings.checkpointer == "postgres":
        from market_analyst.persistence.postgres_backend import open_postgres

        with open_postgres(settings) as postgres:
            yield postgres
    else:
        from market_analyst.persistence.redis_backend import open_redis

        with open_redis(settings) as redis:
            yield redis


def stop_embedded_server(settings: Settings) -> bool:
    """Stop the embedded PostgreSQL of the data directory if one runs; True if one was stopped."""
    from market_analyst.services import stop_embedded_postgres

    return stop_embedded_postgres(settings.postgres_dir)


def embedded_server_pid(pgdata: Path) -> int | None:
    """The PID the embedded server's lock file names, or None when it is not running."""
    pid_file = pgdata / "postmaster.pid"
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
