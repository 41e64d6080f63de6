"""What a server shares with servers on other hosts, said before it starts serving.

Replicas of the inbox agree only on what lives on servers they all reach: checkpoints on
`POSTGRES_URL` or `REDIS_URL`, the records (approvers, sessions, sign-in failures, the audit log)
with `MA_RECORDS=postgres` on `POSTGRES_URL`, profiles and memories on `QDRANT_URL`. The embedded
PostgreSQL, the Qdrant Edge folder, the file records and the directory archive belong to one host.
"""

from __future__ import annotations

from market_analyst.errors import UserError
from market_analyst.settings import Settings


def sharing_notes(settings: Settings) -> list[str]:
    """Lines to show when a server's settings share some stores with other hosts and keep others on
    this one. Refuses (`UserError`) settings that ask for shared records but keep them on this host
    while the checkpoints are on a server: replicas would agree on the threads and not on who may
    approve them or what the audit log says."""
    if settings.records == "postgres" and not settings.postgres_url and settings.checkpointer == "redis":
        raise UserError(
            "MA_RECORDS=postgres with no POSTGRES_URL keeps approvers, sessions and the audit log in this "
            "host's embedded PostgreSQL while the checkpoints are on Redis: set POSTGRES_URL to a server "
            "every host reaches, or use MA_RECORDS=files for one host"
        )
    shared = settings.records == "postgres" and bool(settings.postgres_url)
    if shared and not settings.qdrant_url:
        return [
            "profiles and memories stay in this host's data directory (Qdrant Edge): set QDRANT_URL to "
            "share them with replicas on other hosts"
        ]
    return []
