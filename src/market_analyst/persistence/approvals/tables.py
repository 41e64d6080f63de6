"""One connection per operation to the PostgreSQL records database, for the approval stores.

Each store names its component and its numbered migrations (`records.migrate`, run once under an
advisory lock however many processes start at once). The server's address is found once per process
(finding the embedded server takes a lock and a look at its files) and found again after a failure,
so a server that was restarted is reached at its next address."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from market_analyst.errors import ServiceUnavailable
from market_analyst.persistence.checkpoints.postgres import postgres_connect
from market_analyst.persistence.records import migrate, records_uri
from market_analyst.redaction import redact_url
from market_analyst.settings import Settings

_uris: dict[tuple[str | None, str], str] = {}
_migrated: set[tuple[str, str]] = set()
_lock = threading.Lock()


class RecordsTables:
    """The tables of one component of the records database that `settings` name."""

    def __init__(self, settings: Settings, component: str, migrations: Sequence[str]) -> None:
        self.settings = settings
        self.component = component
        self.migrations = migrations
        self._place = (settings.postgres_url, str(settings.postgres_dir))

    def _uri(self) -> str:
        with _lock:
            known = _uris.get(self._place)
        if known is None:
            known = records_uri(self.settings)
            with _lock:
                _uris[self._place] = known
        return known

    @contextmanager
    def connect(self) -> Iterator[Any]:
        """An autocommit dict-row connection with this component's tables current; closed on exit."""
        uri = self._uri()
        try:
            conn = postgres_connect(uri, redact_url(uri), embedded=not self.settings.postgres_url)
        except ServiceUnavailable:
            with _lock:
                _uris.pop(self._place, None)
            raise
        try:
            if (uri, self.component) not in _migrated:
                migrate(conn, self.component, self.migrations)
                with _lock:
                    _migrated.add((uri, self.component))
            yield conn
        except psycopg.OperationalError as exc:
            with _lock:
                _uris.pop(self._place, None)
            raise ServiceUnavailable(
                f"the records database at {redact_url(uri)} stopped answering ({str(exc).strip()[:200]}); "
                "what finished before is kept: run the command again"
            ) from None
        finally:
            conn.close()
