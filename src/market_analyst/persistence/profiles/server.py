"""Profiles through `qdrant-client`: on a Qdrant server (`QDRANT_URL`), or in a local-mode folder
(`local_mode`), which takes the same client calls.

`qdrant_client` costs about a second to import, so it is imported only inside methods that run when a
server or a local-mode folder is actually used.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from market_analyst.persistence.profiles.base import ProfileSession, StoredPoint

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

COLLECTION = "profiles"


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
            # Local mode warns past 20,000 points; docs/stores.md tells its users so instead.
            warnings.simplefilter("ignore")
            self._client.upsert(COLLECTION, points=structs, wait=True)

    def _remove(self, point_id: str) -> None:
        from qdrant_client import models

        self._client.delete(COLLECTION, points_selector=models.PointIdsList(points=[point_id]), wait=True)
