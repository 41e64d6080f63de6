"""Memories on a Qdrant server (`QDRANT_URL`), through `qdrant-client`: the twin of the Edge store
for several machines and many writers. The same payload, vectors and query composition
(`search.client_query`); the collection's metadata records the embedder.

A server deletes in place, so erasure here is the server's: the points are gone from every query at
once and from its files when it next optimises the segment. `qdrant_client` is imported only when a
server is used.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from market_analyst.choices import RecallMode
from market_analyst.errors import ServiceUnavailable, UserError
from market_analyst.persistence.memory.embedder import Embedder
from market_analyst.persistence.memory.points import META_VERSION, SUPERSEDED, from_payload, to_payload
from market_analyst.persistence.memory.search import client_query, within_budget
from market_analyst.redaction import redact_url, scrub, secrets_of
from market_analyst.state import Memory, check_memory_ref, validate_user_id

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

COLLECTION = "memories"
PAGE = 1024


class QdrantMemoryStore:
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
        self._client_factory = client_factory
        self._make_embedder = embedder
        self._embedder: Embedder | None = None
        self.location = location
        self.collection = collection
        self._bm25: Any = None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self._make_embedder()
        return self._embedder

    @contextmanager
    def _client(self) -> Iterator[QdrantClient]:
        from market_analyst.persistence.profiles.qdrant import is_server_error, server_refused

        client = self._client_factory()
        try:
            yield client
        except Exception as exc:
            if not is_server_error(exc):
                raise
            where = redact_url(self.location)
            reason = scrub(" ".join(str(exc).split())[:200], secrets_of(self.location))
            if server_refused(exc):
                raise UserError(f"the Qdrant server at {where} refused the request: {reason}") from None
            raise ServiceUnavailable(f"the Qdrant server at {where} did not answer ({reason})") from None
        finally:
            client.close()

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
            ("created_at", models.PayloadSchemaType.DATETIME),
        ):
            client.create_payload_index(self.collection, field, field_schema=schema)

    def _check_embedder(self, client: QdrantClient) -> None:
        meta = dict(client.get_collection(self.collection).config.metadata or {})
        embedder = self.embedder
        if meta.get("embedder") != embedder.name or meta.get("dimension") != embedder.dimension:
            raise UserError(
                f"the memories in collection {self.collection} were embedded with {meta.get('embedder')} "
                f"({meta.get('dimension')} dimensions), not {embedder.name} ({embedder.dimension}): "
                "run `market-analyst memories reindex` to embed them again"
            )

    def _sparse(self) -> Any:
        if self._bm25 is None:
            from qdrant_edge import Bm25

            self._bm25 = Bm25()  # the same tokenizer and term hashing as the Edge store
        return self._bm25

    def _points(self, memories: Sequence[Memory]) -> builtins.list[Any]:
        from qdrant_client import models

        dense = self.embedder.embed([memory.text for memory in memories])
        points = []
        for memory, vector in zip(memories, dense, strict=True):
            words = self._sparse().embed_document(memory.text)
            sparse = models.SparseVector(indices=list(words.indices), values=list(words.values))
            points.append(
                models.PointStruct(
                    id=memory.id, vector={"dense": vector, "bm25": sparse}, payload=to_payload(memory)
                )
            )
        return points

    @staticmethod
    def _owner_filter(owner: str, *, live_only: bool = False) -> Any:
        from qdrant_client import models

        must: builtins.list[Any] = [models.FieldCondition(key="owner", match=models.MatchValue(value=owner))]
        if live_only:
            must.append(models.FieldCondition(key="status", match=models.MatchValue(value="live")))
        return models.Filter(must=must)

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

    def _count(self, client: QdrantClient, flt: Any) -> int:
        return int(client.count(self.collection, count_filter=flt, exact=True).count)

    def has_memories(self, owner: str) -> bool:
        owner = validate_user_id(owner)
        with self._client() as client:
            return self._exists(client) and self._count(client, self._owner_filter(owner)) > 0

    def recall(
        self,
        owner: str,
        query: str,
        *,
        ticker: str | None = None,
        limit: int = 5,
        budget_chars: int = 1500,
        mode: RecallMode = "hybrid_recency",
        now: datetime | None = None,
    ) -> builtins.list[Memory]:
        ranked = self.ranked(owner, query, ticker=ticker, limit=limit * 4, mode=mode, now=now)
        return within_budget([memory for memory, _ in ranked], limit=limit, budget_chars=budget_chars)

    def ranked(
        self,
        owner: str,
        query: str,
        *,
        ticker: str | None = None,
        limit: int = 20,
        mode: RecallMode = "hybrid_recency",
        now: datetime | None = None,
    ) -> builtins.list[tuple[Memory, float]]:
        """`recall` before the character budget, with the engine's score of each memory."""
        owner = validate_user_id(owner)
        if limit <= 0:
            return []
        with self._client() as client:
            if (
                not self._exists(client)
                or self._count(client, self._owner_filter(owner, live_only=True)) == 0
            ):
                return []  # before any model is loaded
            dense = None if mode == "bm25" else self.embedder.embed([query])[0]
            if dense is not None:
                self._check_embedder(client)
            arguments = client_query(
                owner=owner,
                dense=dense,
                sparse=self._sparse().embed_query(query),
                mode=mode,
                ticker=ticker,
                now=now or datetime.now(UTC),
            )
            found = client.query_points(self.collection, limit=limit, with_payload=True, **arguments).points
        ranked = [(from_payload(point.id, dict(point.payload or {})), float(point.score)) for point in found]
        return [(m, score) for m, score in ranked if m.owner == owner and not m.superseded]

    def _scroll(self, client: QdrantClient, flt: Any, *, with_vectors: bool = False) -> builtins.list[Any]:
        records: builtins.list[Any] = []
        offset = None
        while True:
            page, offset = client.scroll(
                self.collection,
                scroll_filter=flt,
                limit=PAGE,
                offset=offset,
                with_payload=True,
                with_vectors=with_vectors,
            )
            records.extend(page)
            if offset is None or not page:
                return records

    def list(self, owner: str, *, include_superseded: bool = False) -> builtins.list[Memory]:
        owner = validate_user_id(owner)
        with self._client() as client:
            if not self._exists(client):
                return []
            records = self._scroll(client, self._owner_filter(owner, live_only=not include_superseded))
        memories = [from_payload(r.id, dict(r.payload or {})) for r in records]
        memories = [m for m in memories if m.owner == owner]
        return sorted(memories, key=lambda m: (m.created_at, m.id), reverse=True)

    def _owned(self, client: QdrantClient, owner: str, memory_id: str) -> Memory | None:
        records = client.retrieve(self.collection, ids=[memory_id], with_payload=True, with_vectors=False)
        if not records:
            return None
        memory = from_payload(records[0].id, dict(records[0].payload or {}))
        return memory if memory.owner == owner else None

    def get(self, owner: str, memory_id: str) -> Memory | None:
        owner, memory_id = validate_user_id(owner), check_memory_ref(memory_id)
        with self._client() as client:
            return self._owned(client, owner, memory_id) if self._exists(client) else None

    def replace(self, owner: str, old_id: str, new: Memory) -> None:
        owner, old_id = validate_user_id(owner), check_memory_ref(old_id)
        if new.owner != owner:
            raise UserError(f"a memory of {new.owner} cannot replace one of {owner}")
        if new.id == old_id:
            raise UserError(f"memory {old_id} already says that")
        new = new.model_copy(update={"replaces": old_id, "superseded": False})
        if self.get(owner, old_id) is None:
            raise UserError(f"no memory {old_id} for user {owner}")
        points = self._points([new])
        with self._client() as client:
            self._check_embedder(client)
            client.upsert(self.collection, points, wait=True)  # the new one first, as on Edge
            client.set_payload(self.collection, payload={"status": SUPERSEDED}, points=[old_id], wait=True)

    def _delete(self, client: QdrantClient, ids: builtins.list[str]) -> int:
        from qdrant_client import models

        if ids:
            client.delete(self.collection, points_selector=models.PointIdsList(points=list(ids)), wait=True)
        return len(ids)

    def forget(self, owner: str, memory_id: str) -> bool:
        owner, memory_id = validate_user_id(owner), check_memory_ref(memory_id)
        with self._client() as client:
            if not self._exists(client) or self._owned(client, owner, memory_id) is None:
                return False
            return self._delete(client, [memory_id]) == 1

    def forget_user(self, owner: str) -> int:
        owner = validate_user_id(owner)
        with self._client() as client:
            if not self._exists(client):
                return 0
            return self._delete(client, [str(r.id) for r in self._scroll(client, self._owner_filter(owner))])

    @staticmethod
    def _before(moment: datetime) -> Any:
        from qdrant_client import models

        return models.Filter(
            must=[
                models.FieldCondition(key="created_at", range=models.DatetimeRange(lt=moment.astimezone(UTC)))
            ]
        )

    def prune(self, older_than: datetime) -> int:
        with self._client() as client:
            if not self._exists(client):
                return 0
            return self._delete(client, [str(r.id) for r in self._scroll(client, self._before(older_than))])

    def count_before(self, older_than: datetime) -> int:
        """How many memories (of every owner) were made before `older_than`."""
        with self._client() as client:
            return self._count(client, self._before(older_than)) if self._exists(client) else 0

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

    def all_points(self) -> builtins.list[dict[str, Any]]:
        """Every point of the collection with its payload and vectors."""
        with self._client() as client:
            if not self._exists(client):
                return []
            records = self._scroll(client, None, with_vectors=True)
        return [
            {"id": str(r.id), "payload": dict(r.payload or {}), "vector": _plain(r.vector)} for r in records
        ]


def _plain(vector: Any) -> Any:
    if isinstance(vector, dict):
        return {name: _plain(value) for name, value in vector.items()}
    if hasattr(vector, "indices"):
        return {"indices": list(vector.indices), "values": list(vector.values)}
    return vector
