"""Memories on a Qdrant server (`QDRANT_URL`), through `qdrant-client`: the twin of the Edge store
for several machines and many writers. The same payload, vectors and query composition
(`search.client_query`); the collection's metadata records the embedder.

A server deletes in place, so erasure here is the server's: the points are gone from every query at
once and from its files when it next optimises the segment. `qdrant_client` is imported only when a
server is used.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from market_analyst.persistence.memory.base import BaseMemoryStore, every_page
from market_analyst.persistence.memory.embedder import Embedder
from market_analyst.persistence.memory.points import LIVE, META_VERSION, SUPERSEDED, from_payload, to_payload
from market_analyst.persistence.memory.search import Recall, client_query
from market_analyst.persistence.qdrant.server import connected
from market_analyst.state import TRAIL_KINDS, Memory

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

COLLECTION = "memories"
PAGE = 1024


class QdrantMemoryStore(BaseMemoryStore):
    """Memories in the `memories` collection of the Qdrant server `client_factory` connects to.
    Satisfies `ports.MemoryStore`; opens nothing and loads no model until used."""

    def __init__(
        self,
        client_factory: Callable[[], QdrantClient],
        *,
        embedder: Callable[[], Embedder],
        location: str,
        collection: str = COLLECTION,
    ) -> None:
        super().__init__(embedder=embedder, location=location)
        self._client_factory = client_factory
        self.collection = collection

    def _client(self) -> AbstractContextManager[QdrantClient]:
        return connected(self._client_factory, location=self.location)

    def _exists(self, client: QdrantClient) -> bool:
        return bool(client.collection_exists(self.collection))

    def _create(self, client: QdrantClient) -> None:
        from qdrant_client import models

        embedder = self.embedder
        try:
            client.create_collection(
                self.collection,
                vectors_config={
                    "dense": models.VectorParams(size=embedder.dimension, distance=models.Distance.COSINE)
                },
                sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)},
                metadata={
                    "version": META_VERSION,
                    "embedder": embedder.name,
                    "dimension": embedder.dimension,
                },
            )
        except Exception:
            if not self._exists(client):  # another process may have created it meanwhile
                raise
            return
        owner = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
        client.create_payload_index(self.collection, "owner", field_schema=owner)
        for field, schema in (
            ("status", models.PayloadSchemaType.KEYWORD),
            ("ticker", models.PayloadSchemaType.KEYWORD),
            ("kind", models.PayloadSchemaType.KEYWORD),
            ("created_at", models.PayloadSchemaType.DATETIME),
        ):
            client.create_payload_index(self.collection, field, field_schema=schema)

    def _check_embedder(self, client: QdrantClient) -> None:
        meta = dict(client.get_collection(self.collection).config.metadata or {})
        self._refuse_other_embedder(meta, f"collection {self.collection}")

    def _points(self, memories: Sequence[Memory]) -> builtins.list[Any]:
        from qdrant_client import models

        return [
            models.PointStruct(
                id=memory.id,
                vector={
                    "dense": dense,
                    "bm25": models.SparseVector(indices=list(words.indices), values=list(words.values)),
                },
                payload=to_payload(memory),
            )
            for memory, dense, words in self._embedded(memories)
        ]

    def _scroll(self, client: QdrantClient, flt: Any, *, with_vectors: bool = False) -> builtins.list[Any]:
        return every_page(
            lambda offset: client.scroll(
                self.collection,
                scroll_filter=flt,
                limit=PAGE,
                offset=offset,
                with_payload=True,
                with_vectors=with_vectors,
            )
        )

    def _delete(self, client: QdrantClient, ids: builtins.list[str]) -> int:
        from qdrant_client import models

        if ids:
            client.delete(self.collection, points_selector=models.PointIdsList(points=list(ids)), wait=True)
        return len(ids)

    # -- the engine's point operations ---------------------------------------------------------

    def _owner_filter(self, owner: str, *, live_only: bool) -> Any:
        from qdrant_client import models

        must: builtins.list[Any] = [models.FieldCondition(key="owner", match=models.MatchValue(value=owner))]
        if live_only:
            must.append(models.FieldCondition(key="status", match=models.MatchValue(value=LIVE)))
        return models.Filter(must=must)

    def _trail_filter(self, owner: str, ticker: str) -> Any:
        from qdrant_client import models

        flt = self._owner_filter(owner, live_only=True)
        flt.must += [
            models.FieldCondition(key="ticker", match=models.MatchValue(value=ticker)),
            models.FieldCondition(key="kind", match=models.MatchAny(any=list(TRAIL_KINDS))),
        ]
        return flt

    def _made_before(self, moment: datetime) -> Any:
        from qdrant_client import models

        return models.Filter(
            must=[
                models.FieldCondition(key="created_at", range=models.DatetimeRange(lt=moment.astimezone(UTC)))
            ]
        )

    def _with_ids(self, ids: Collection[str]) -> Any:
        from qdrant_client import models

        return models.Filter(must=[models.HasIdCondition(has_id=list(ids))])

    def _may_have(self, owner: str) -> bool:
        return True  # the count that follows is one request to the server, which indexes owners

    def _matching(self, flt: Any, *, with_vectors: bool = False) -> builtins.list[Any]:
        with self._client() as client:
            return self._scroll(client, flt, with_vectors=with_vectors) if self._exists(client) else []

    def _count(self, client: QdrantClient, flt: Any) -> int:
        return int(client.count(self.collection, count_filter=flt, exact=True).count)

    def _count_matching(self, flt: Any) -> int:
        with self._client() as client:
            return self._count(client, flt) if self._exists(client) else 0

    def _erase_matching(self, flt: Any) -> int:
        with self._client() as client:
            if not self._exists(client):
                return 0
            return self._delete(client, [str(r.id) for r in self._scroll(client, flt)])

    def _search(self, recall: Recall) -> builtins.list[tuple[Memory, float]]:
        with self._client() as client:
            live = self._owner_filter(recall.owner, live_only=True)
            if not self._exists(client) or self._count(client, live) == 0:
                return []  # before any model is loaded
            dense, words = self._query_vectors(recall)
            if dense is not None:
                self._check_embedder(client)
            arguments = client_query(recall, dense=dense, sparse=words)
            found = client.query_points(self.collection, limit=recall.limit, with_payload=True, **arguments)
        return [
            (from_payload(point.id, dict(point.payload or {})), float(point.score)) for point in found.points
        ]

    def _retrieve(self, client: QdrantClient, memory_id: str) -> builtins.list[Any]:
        return list(client.retrieve(self.collection, ids=[memory_id], with_payload=True, with_vectors=False))

    def _retrieve_many(self, ids: builtins.list[str]) -> builtins.list[Any]:
        with self._client() as client:
            if not self._exists(client):
                return []
            return list(client.retrieve(self.collection, ids=ids, with_payload=True, with_vectors=False))

    def _get(self, owner: str, memory_id: str) -> Memory | None:
        with self._client() as client:
            return self._owned(owner, self._retrieve(client, memory_id)) if self._exists(client) else None

    def _supersede(self, owner: str, old_id: str, new: Memory) -> None:
        points = self._points([new])
        with self._client() as client:
            self._check_embedder(client)
            client.upsert(self.collection, points, wait=True)  # the new one first, as on Edge
            client.set_payload(self.collection, payload={"status": SUPERSEDED}, points=[old_id], wait=True)

    def _forget(self, owner: str, memory_id: str, revive: str | None = None) -> bool:
        with self._client() as client:
            if not self._exists(client) or self._owned(owner, self._retrieve(client, memory_id)) is None:
                return False
            if revive is not None and self._owned(owner, self._retrieve(client, revive)) is not None:
                client.set_payload(self.collection, payload={"status": LIVE}, points=[revive], wait=True)
            return self._delete(client, [memory_id]) == 1

    # -- the port's writes ---------------------------------------------------------------------

    def write(self, memories: Sequence[Memory]) -> None:
        if not memories:
            return
        points = self._points(memories)
        with self._client() as client:
            if not self._exists(client):
                self._create(client)
            self._check_embedder(client)
            for start in range(0, len(points), PAGE):
                client.upsert(self.collection, points[start : start + PAGE], wait=True)

    def reindex(self) -> int:
        """Embed every memory again, then drop the collection and write the new points under its name
        (a server has no rename). Everything is embedded before anything is dropped, so an embedder
        that fails or a kill while embedding leaves the old collection as it was."""
        with self._client() as client:
            if not self._exists(client):
                return 0
            memories = [from_payload(r.id, dict(r.payload or {})) for r in self._scroll(client, None)]
            pages = [self._points(memories[start : start + PAGE]) for start in range(0, len(memories), PAGE)]
            client.delete_collection(self.collection)
            self._create(client)
            for points in pages:
                client.upsert(self.collection, points, wait=True)
            return len(memories)
