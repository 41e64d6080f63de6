"""Memories in a Qdrant Edge shard in the data directory (`memories/`): Qdrant's engine in-process.

One shard holds every owner's memories: a dense vector (`dense`, the embedder's) and a BM25 sparse
vector (`bm25`, IDF-weighted by the engine) per point, keyword indexes on `owner` and `ticker`, a
datetime index on `created_at`. Every read is filtered by owner, and an owner without memories costs
no open at all (`owners`).

Edge admits one process per folder, so, like the profile store, each operation holds a lock file
beside the shard from before it opens until its files are owner-only after it closed, and a command
that finds it held waits a few seconds (`store_access`). Embedding happens outside the lock.

The embedder's name and dimension are written into the shard folder (`META_FILE`) when it is made;
vectors are only ever written or compared under the same embedder. A shard is made, or re-made by an
erasure or `reindex`, beside the store and renamed into place once complete (`qdrant.edge_shard`), so
a `kill -9` leaves the old shard or the new one, never half of either.
"""

from __future__ import annotations

import builtins
import copy
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from market_analyst.errors import UserError
from market_analyst.files import private_tree, refuse_under_file
from market_analyst.persistence.memory.base import BaseMemoryStore, Recall, every_page
from market_analyst.persistence.memory.embedder import Embedder
from market_analyst.persistence.memory.owners import OwnerMarkers, marker_key
from market_analyst.persistence.memory.points import (
    LIVE,
    META_VERSION,
    SUPERSEDED,
    from_payload,
    iso_z,
    to_payload,
)
from market_analyst.persistence.memory.search import edge_query, owner_filter
from market_analyst.persistence.qdrant import edge_shard
from market_analyst.persistence.store_access import LOCK_WAIT_SECONDS, lock_file, wait_while_busy
from market_analyst.state import Memory

if TYPE_CHECKING:
    from qdrant_edge import EdgeShard

WHAT = "the memory store"
META_FILE = "memory_embedder.json"
WRITE_BATCH = 512  # points per update: one log entry each, all of it or none after a crash
SCROLL_PAGE = 1024
# The markers' key of a store opened without the records secret (tests, benchmarks): a store the
# application opens names its owners under a key of its own records (`deps.open_memory`).
UNSHARED_MARKER_KEY = marker_key("")


def is_memory_store(path: Path) -> bool:
    """Whether `path` holds a complete memory shard: the shard and the record of its embedder."""
    return edge_shard.is_shard(path) and (path / META_FILE).is_file()


def read_meta(path: Path) -> dict[str, Any]:
    """What the shard at `path` records about its dense vectors."""
    return dict(json.loads((path / META_FILE).read_text(encoding="utf-8")))


class EdgeMemoryStore(BaseMemoryStore):
    """Memories in the Edge shard at `path`, embedded by `embedder`. Satisfies `ports.MemoryStore`.

    Constructing it opens nothing and loads no model; each method opens the shard for that one
    operation and closes it."""

    def __init__(
        self,
        path: Path,
        *,
        embedder: Callable[[], Embedder],
        lock_wait_seconds: float = LOCK_WAIT_SECONDS,
        marker_key: Callable[[], bytes] = lambda: UNSHARED_MARKER_KEY,
    ) -> None:
        super().__init__(embedder=embedder, location=str(path))
        self.path = path
        self._lock_wait_seconds = lock_wait_seconds
        self._owners = OwnerMarkers(path.with_name(f".{path.name}.owners"), what=WHAT, key=marker_key)

    def at_once(self) -> EdgeMemoryStore:
        _ = self.embedder  # made (not loaded) first, so that both share it and load its model once
        at_once = copy.copy(self)  # the same embedder and markers, no wait for the folder
        at_once._lock_wait_seconds = 0.0
        return at_once

    # -- opening -------------------------------------------------------------------------------

    def _absent(self) -> bool:
        if is_memory_store(self.path) or edge_shard.sibling(self.path, edge_shard.READY).exists():
            return False
        if is_memory_store(edge_shard.sibling(self.path, edge_shard.OLD)):
            return False  # killed in the middle of a swap: the next opening puts it back
        refuse_under_file(self.path, WHAT)
        return True

    @contextmanager
    def _locked(self, *, create: bool) -> Iterator[bool]:
        """Hold the folder for one operation, with any interrupted swap finished (and the shard made
        first if `create`); yields whether there is a shard."""

        def attempt() -> tuple[ExitStack, bool]:
            with ExitStack() as held:
                # Held from before the shard opens until its files are owner-only after it closed:
                # Edge releases its own lock (the log's) while the shard still finishes closing.
                held.enter_context(
                    lock_file(self.path.with_name(f".{self.path.name}.session.lock"), what=WHAT)
                )
                self._settle(create=create)
                return held.pop_all(), is_memory_store(self.path)

        held, present = wait_while_busy(
            attempt, location=self.location, seconds=self._lock_wait_seconds, what=WHAT
        )
        with held:
            yield present

    @contextmanager
    def _session(self, *, create: bool = False) -> Iterator[EdgeShard | None]:
        """The open shard for one operation, made first if `create`; else None when there is none
        (without taking the folder when nothing is there at all)."""
        if not create and self._absent():
            yield None
            return
        with self._locked(create=create) as present:
            if not present:
                yield None
                return
            shard = edge_shard.load(self.path, what=WHAT)
            try:
                if not self._owners.current():  # an earlier release's markers, or another key's
                    self._owners.rebuild(self._shard_owners(shard))
                yield shard
            finally:
                shard.close()
                private_tree(self.path)  # Edge creates its files with the umask's modes

    def _settle(self, *, create: bool) -> None:
        """Finish what a killed command left (holding the folder), or make the shard if `create`."""
        edge_shard.settle(self.path, complete=is_memory_store)
        if is_memory_store(self.path) or not create:
            return
        if self.path.exists() and any(self.path.iterdir()):
            raise UserError(
                f"{self.path} holds no memory store; move it away, or point MA_DATA_DIR elsewhere"
            )
        embedder = self.embedder
        edge_shard.install(self._build([], name=embedder.name, dimension=embedder.dimension), self.path)

    # -- making a shard ------------------------------------------------------------------------

    def _build(self, pages: Iterable[Sequence[Any]], *, name: str, dimension: int) -> Path:
        """A complete shard in `<path>.edge-new` holding the points of `pages` (one update each),
        closed, with the embedder `name` and `dimension` recorded."""
        from qdrant_edge import (
            Distance,
            EdgeConfig,
            EdgeShard,
            EdgeSparseVectorParams,
            EdgeVectorParams,
            Modifier,
            PayloadSchemaType,
            UpdateOperation,
        )

        def fill(new: Path) -> None:
            config = EdgeConfig(
                vectors={"dense": EdgeVectorParams(size=dimension, distance=Distance.Cosine)},
                sparse_vectors={"bm25": EdgeSparseVectorParams(modifier=Modifier.Idf)},
            )
            shard = EdgeShard.create(str(new), config)  # the write-ahead log stays on: it is the lock
            try:
                for field, kind in (
                    ("owner", PayloadSchemaType.Keyword),
                    ("status", PayloadSchemaType.Keyword),
                    ("ticker", PayloadSchemaType.Keyword),
                    ("created_at", PayloadSchemaType.Datetime),
                ):
                    shard.update(UpdateOperation.create_field_index(field, kind))
                for page in pages:
                    if page:
                        shard.update(UpdateOperation.upsert_points(list(page)))
            finally:
                shard.close()
            meta = {"version": META_VERSION, "embedder": name, "dimension": dimension}
            (new / META_FILE).write_text(json.dumps(meta), encoding="utf-8")

        return edge_shard.build_beside(self.path, fill, what=WHAT)

    def _rewrite(
        self, shard: EdgeShard, *, drop: set[str], owners: set[str], embed: bool = False
    ) -> Iterator[builtins.list[Any]]:
        """The points of `shard` a page at a time, without those in `drop`; with `embed`, their
        vectors made again by this store's embedder. Adds the owners of the points kept to `owners`."""
        from qdrant_edge import Point, ScrollRequest

        offset = None
        while True:
            page, offset = shard.scroll(
                ScrollRequest(offset=offset, limit=WRITE_BATCH, with_payload=True, with_vector=not embed)
            )
            kept = [record for record in page if str(record.id) not in drop]
            owners.update(str((record.payload or {}).get("owner")) for record in kept)
            if embed:
                yield self._points([from_payload(record.id, record.payload or {}) for record in kept])
            else:
                yield [Point(record.id, record.vector or {}, record.payload or {}) for record in kept]
            if offset is None or not page:
                return

    def _swap(self, shard: EdgeShard, *, drop: set[str], embed: bool = False) -> None:
        """Replace the open `shard` (closed here) by a new one without the points in `drop`.

        Erasing by rewriting, not by deleting in place: Edge's delete only hides a point, and its
        text stays in the segment files and the write-ahead log until they are overwritten. The new
        shard holds the other points' payloads and vectors exactly as they were."""
        meta = read_meta(self.path)
        name, dimension = (
            (self.embedder.name, self.embedder.dimension) if embed else (meta["embedder"], meta["dimension"])
        )
        try:
            owners: set[str] = set()
            pages = self._rewrite(shard, drop=drop, owners=owners, embed=embed)
            new = self._build(pages, name=name, dimension=dimension)
        finally:
            shard.close()
        edge_shard.swap(self.path, new)
        self._owners.keep_only(owners)

    def _shard_owners(self, shard: EdgeShard) -> set[str]:
        return {str((record.payload or {}).get("owner")) for record in self._scroll(shard, None)}

    def _check_embedder(self) -> None:
        self._refuse_other_embedder(read_meta(self.path), str(self.path))

    def _points(self, memories: Sequence[Memory]) -> builtins.list[Any]:
        from qdrant_edge import Point

        return [
            Point(memory.id, {"dense": dense, "bm25": words}, to_payload(memory))
            for memory, dense, words in self._embedded(memories)
        ]

    # -- the engine's point operations ---------------------------------------------------------

    def _owner_filter(self, owner: str, *, live_only: bool) -> Any:
        return owner_filter(owner, live_only=live_only)

    def _made_before(self, moment: datetime) -> Any:
        from qdrant_edge import FieldCondition, Filter, RangeDateTime

        return Filter(must=[FieldCondition(key="created_at", range=RangeDateTime(lt=iso_z(moment)))])

    def _with_ids(self, ids: Collection[str]) -> Any:
        from qdrant_edge import Filter, HasIdCondition

        return Filter(must=[HasIdCondition(set(ids))])

    def _may_have(self, owner: str) -> bool:
        return not self._absent() and self._owners.may_have(owner)

    def _scroll(self, shard: EdgeShard, flt: Any, *, with_vectors: bool = False) -> builtins.list[Any]:
        from qdrant_edge import ScrollRequest

        return every_page(
            lambda offset: shard.scroll(
                ScrollRequest(
                    offset=offset, limit=SCROLL_PAGE, filter=flt, with_payload=True, with_vector=with_vectors
                )
            )
        )

    def _matching(self, flt: Any, *, with_vectors: bool = False) -> builtins.list[Any]:
        with self._session() as shard:
            return [] if shard is None else self._scroll(shard, flt, with_vectors=with_vectors)

    def _count_matching(self, flt: Any) -> int:
        from qdrant_edge import CountRequest

        with self._session() as shard:
            return 0 if shard is None else shard.count(CountRequest(filter=flt, exact=True))

    def _erase_matching(self, flt: Any) -> int:
        with self._session() as shard:
            if shard is None:
                return 0
            ids = {str(record.id) for record in self._scroll(shard, flt)}
            if ids:
                self._swap(shard, drop=ids)
            return len(ids)

    def _search(self, recall: Recall) -> builtins.list[tuple[Memory, float]]:
        if not self._may_have(recall.owner):
            return []  # no shard opened, no model loaded
        # Embedded before the shard is opened, so the folder is held only for the query.
        dense, words = self._query_vectors(recall)
        request = edge_query(recall, dense=dense, sparse=words)
        with self._session() as shard:
            if shard is None:
                return []
            if dense is not None:
                self._check_embedder()
            found = shard.query(request)
        return [(from_payload(point.id, point.payload or {}), point.score) for point in found]

    def _retrieve_many(self, ids: builtins.list[str]) -> builtins.list[Any]:
        with self._session() as shard:
            return [] if shard is None else list(shard.retrieve(list[Any](ids), True, False))

    def _get(self, owner: str, memory_id: str) -> Memory | None:
        with self._session() as shard:
            return None if shard is None else self._owned(owner, shard.retrieve([memory_id], True, False))

    def _supersede(self, owner: str, old_id: str, new: Memory) -> None:
        from qdrant_edge import UpdateOperation

        points = self._points([new])
        with self._session(create=True) as shard:
            assert shard is not None
            self._check_embedder()
            if self._owned(owner, shard.retrieve([old_id], True, False)) is None:
                raise self._no_memory(owner, old_id)  # forgotten meanwhile by another process
            shard.update(UpdateOperation.upsert_points(points))
            shard.update(UpdateOperation.set_payload([old_id], {"status": SUPERSEDED}))

    def _forget(self, owner: str, memory_id: str, revive: str | None = None) -> bool:
        from qdrant_edge import UpdateOperation

        with self._session() as shard:
            if shard is None or self._owned(owner, shard.retrieve([memory_id], True, False)) is None:
                return False
            if revive is not None and self._owned(owner, shard.retrieve([revive], True, False)) is not None:
                shard.update(UpdateOperation.set_payload([revive], {"status": LIVE}))
            self._swap(shard, drop={memory_id})
            return True

    # -- the port's writes ---------------------------------------------------------------------

    def write(self, memories: Sequence[Memory]) -> None:
        from qdrant_edge import UpdateOperation

        if not memories:
            return
        points = self._points(memories)
        with self._session(create=True) as shard:
            assert shard is not None
            self._check_embedder()
            self._owners.mark({memory.owner for memory in memories})  # before the points: see `owners`
            for start in range(0, len(points), WRITE_BATCH):
                shard.update(UpdateOperation.upsert_points(points[start : start + WRITE_BATCH]))

    def reindex(self) -> int:
        """Embed every memory again with this store's embedder (after a change of model); returns
        how many. The new shard replaces the old one only once it is complete."""
        from qdrant_edge import CountRequest

        with self._session() as shard:
            if shard is None:
                return 0
            count = shard.count(CountRequest(exact=True))
            self._swap(shard, drop=set(), embed=True)
            return count
