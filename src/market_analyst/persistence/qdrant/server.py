"""The Qdrant server (`QDRANT_URL`) through `qdrant-client`: how a client is opened, and how a request
that failed becomes one line, for every store kept there.

`qdrant_client` costs about a second to import, so it is imported only inside these functions, when a
server is actually used.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from market_analyst.errors import ServiceUnavailable, UserError
from market_analyst.redaction import redact_url, scrub, secrets_of

if TYPE_CHECKING:
    from qdrant_client import QdrantClient


def open_server_client(url: str, api_key: str | None) -> QdrantClient:
    """A client for the Qdrant server at `url`; connecting happens at the first request."""
    from qdrant_client import QdrantClient

    with warnings.catch_warnings():
        # An API key over plain http warns on stderr ("insecure connection"); a command prints one
        # line, and docs/stores.md says to use https beyond the local machine.
        warnings.simplefilter("ignore")
        # No version check on connect: it warns on stderr when the server is down, and the first
        # request reports that anyway, as one line.
        return QdrantClient(url=url, api_key=api_key, check_compatibility=False)


def is_server_error(exc: Exception) -> bool:
    """A refused or failed request to a server (down, wrong key): not a bug."""
    from qdrant_client.http.exceptions import ApiException

    return isinstance(exc, ApiException | ConnectionError)


def server_refused(exc: Exception) -> bool:
    """The server answered and refused (a wrong key, a bad request): the user's to fix. Otherwise it
    did not answer, or failed: unavailable."""
    from qdrant_client.http.exceptions import UnexpectedResponse

    return (
        isinstance(exc, UnexpectedResponse) and exc.status_code is not None and 400 <= exc.status_code < 500
    )


@contextmanager
def connected(
    client_factory: Callable[[], QdrantClient], *, location: str, unanswered: str = ""
) -> Iterator[QdrantClient]:
    """A client from `client_factory` for the block, closed after it. A request the server at
    `location` refused is a `UserError`, one it did not answer `ServiceUnavailable` (with `unanswered`
    after the reason), each one line with no secret of the URL in it."""
    client = client_factory()
    try:
        yield client
    except Exception as exc:
        if not is_server_error(exc):
            raise
        where = redact_url(location)
        reason = scrub(" ".join(str(exc).split())[:200], secrets_of(location))
        if server_refused(exc):
            raise UserError(f"the Qdrant server at {where} refused the request: {reason}") from None
        raise ServiceUnavailable(
            f"the Qdrant server at {where} did not answer ({reason}){unanswered}"
        ) from None
    finally:
        client.close()
