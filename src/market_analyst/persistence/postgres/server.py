"""Where a PostgreSQL server is: the value the factory (`market_analyst.deps`) makes of the settings
and hands to every store on it, in place of the settings themselves. Imports no driver, so making
one costs nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from market_analyst.persistence.postgres.embedded import embedded_postgres_uri
from market_analyst.redaction import redact_url


@dataclass(frozen=True)
class PostgresServer:
    """A PostgreSQL server: the one at `url` (`POSTGRES_URL`), or with no URL the embedded server
    whose files are in `pgdata`. Nothing starts until `uri()` is asked."""

    url: str | None
    pgdata: Path

    @property
    def embedded(self) -> bool:
        """Whether this is the embedded server of the data directory."""
        return not self.url

    def uri(self) -> str:
        """The connection string: the URL, or the embedded server's socket URI (started if it is not
        running)."""
        return self.url or embedded_postgres_uri(self.pgdata)

    def describe(self, what: str) -> str:
        """`what` on this server, for messages, without its password (starts nothing)."""
        if self.url:
            return f"the PostgreSQL {what} at {redact_url(self.url)}"
        return f"the PostgreSQL {what} in the embedded server at {self.pgdata}"
