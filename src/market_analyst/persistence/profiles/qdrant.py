"""Profiles through `qdrant-client`: on a Qdrant server (`QDRANT_URL`), or in a local-mode folder
(`MA_PROFILE_STORE=local`, and the folders earlier versions wrote, which are read once to migrate).

`qdrant_client` costs about a second to import, so only this module imports it, and only inside
functions that are called when a server or a local-mode folder is actually used.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from market_analyst.persistence.profiles.session import ProfileSession, StoredPoint
from market_analyst.persistence.store_access import StoreBusy

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

COLLECTION = "profiles"
# Local mode scans every point for each page it returns, so few large pages read a folder fastest.
READ_PAGE = 20_000
_FOLDER_HELD = "already accessed by another instance"


def is_local_mode_folder(path: Path) -> bool:
    """Whether `path` is a folder `qdrant-client` local mode wrote (it keeps `meta.json` there)."""
    return (path / "meta.json").is_file()


def open_local_client(path: Path) -> QdrantClient:
    """A client on the local-mode folder `path`; `StoreBusy` when another process has it open."""
    from qdrant_client import QdrantClient

    try:
        with warnings.catch_warnings():
            # Opening a folder of more than 20,000 points warns on stderr; a command prints one line.
            warnings.simplefilter("ignore")
            return QdrantClient(path=str(path))
    except RuntimeError as exc:
        if _FOLDER_HELD in str(exc):
            raise StoreBusy(str(path)) from None
        raise


def open_server_client(url: str, api_key: str | None) -> QdrantClient:
    """A client for the Qdrant server at `url`; connecting happens at the first request."""
    from qdrant_client import QdrantClient

    with warnings.catch_warnings():
        # An API key over plain http warns on stderr ("insecure connection"); a command prints one
        # line, and the README says to use https beyond the local machine.
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


def all_points(client: QdrantClient) -> list[StoredPoint]:
    """Every point of the profile collection, as stored (an invalid payload is copied, not judged)."""
    if not client.collection_exists(COLLECTION):
        return []
    points: list[StoredPoint] = []
    offset = None
    while True:
        records, offset = client.scroll(
            COLLECTION, limit=READ_PAGE, offset=offset, with_payload=True, with_vectors=False
        )
        points.extend((_plain_id(record.id), dict(record.payload or {})) for record in records)
        if offset is None:
            return points


def _plain_id(point_id: object) -> str | int:
    return point_id if isinstance(point_id, int) else str(point_id)


class QdrantClientSession(ProfileSession):
    """One open `qdrant-client` client on the profile collection (a server or a local folder)."""

    def __init__(self, client: QdrantClient, *, now: Callable[[], datetime], server: bool) -> None:
        super().__init__(now=now)
        self._client = client
        self._server = server
        self._ready = False

    def _exists(self) -> bool:
        if not self._ready:
            self._ready = self._client.collection_exists(COLLECTION)
        return self._ready

    def _ensure_collection(self) -> None:
        if self._exists():
            return
        from qdrant_client import models

        # No vectors: a profile is looked up by user ID, never by similarity.
        try:
            self._client.create_collection(COLLECTION, vectors_config={})
        except Exception:
            # On a server another process may have created it between the check and the create.
            if not self._client.collection_exists(COLLECTION):
                raise
        if self._server:
            # Tenant-aware keyword index: a server co-locates each user's points and filters on
            # `user_id` without a scan. Local mode ignores payload indexes, so it is not asked to.
            self._client.create_payload_index(
                COLLECTION,
                field_name="user_id",
                field_schema=models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
            )
        self._ready = True

    def _payload(self, point_id: str) -> dict[str, Any] | None:
        if not self._exists():
            return None
        records = self._client.retrieve(COLLECTION, ids=[point_id], with_payload=True, with_vectors=False)
        return dict(records[0].payload or {}) if records else None

    def _put(self, points: Sequence[StoredPoint]) -> None:
        from qdrant_client import models

        self._ensure_collection()
        structs = [models.PointStruct(id=pid, vector={}, payload=payload) for pid, payload in points]
        with warnings.catch_warnings():
            # Local mode warns past 20,000 points; the README tells its users so instead.
            warnings.simplefilter("ignore")
            self._client.upsert(COLLECTION, points=structs, wait=True)

    def _remove(self, point_id: str) -> None:
        from qdrant_client import models

        self._client.delete(COLLECTION, points_selector=models.PointIdsList(points=[point_id]), wait=True)
