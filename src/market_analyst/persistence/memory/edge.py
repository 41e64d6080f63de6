"""Memories in a Qdrant Edge shard in the data directory (`memories/`): Qdrant's engine in-process.

One shard holds every owner's memories: a dense vector (`dense`, the embedder's) and a BM25 sparse
vector (`bm25`, IDF-weighted by the engine) per point, keyword indexes on `owner` and `ticker`, a
datetime index on `created_at`. Every read is filtered by owner.

Edge admits one process per folder, so, like the profile store, each operation holds a lock file
beside the shard from before it opens until its files are owner-only after it closed, and a command
that finds it held waits a few seconds (`store_access`). Embedding happens outside the lock.

The embedder's name and dimension are written into the shard folder (`META_FILE`) when it is made;
vectors are only ever written or compared under the same embedder. A shard is made, or re-made by
`reindex`, in a sibling folder and renamed into place once complete, so a `kill -9` leaves the old
shard or the new one, never half of either.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from market_analyst.choices import RecallMode
from market_analyst.errors import UserError
from market_analyst.files import fsync_dir, private_dir, private_tree, refuse_under_file
from market_analyst.persistence.memory.embedder import Embedder
from market_analyst.persistence.memory.points import META_VERSION, SUPERSEDED, from_payload, iso_z, to_payload
from market_analyst.persistence.memory.search import edge_query, owner_filter, within_budget
from market_analyst.persistence.store_access import LOCK_WAIT_SECONDS, StoreBusy, lock_file, wait_while_busy
from market_analyst.state import Memory, check_memory_ref, validate_user_id

if TYPE_CHECKING:
    from qdrant_edge import EdgeShard

WHAT = "the memory store"
CONFIG_FILE = "edge_config.json"  # Edge writes it when a shard is created
META_FILE = "memory_embedder.json"
WRITE_BATCH = 512  # points per update: one log entry each, all of it or none after a crash
SCROLL_PAGE = 1024
_LOCKED = "WouldBlock"


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def is_memory_store(path: Path) -> bool:
    """Whether `path` holds a complete memory shard."""
    return (path / CONFIG_FILE).is_file() and (path / META_FILE).is_file()


def read_meta(path: Path) -> dict[str, Any]:
    """What the shard at `path` records about its dense vectors."""
    return dict(json.loads((path / META_FILE).read_text(encoding="utf-8")))


class EdgeMemoryStore:
    """Memories in the Edge shard at `path`, embedded by `embedder`. Satisfies `ports.MemoryStore`.

    Constructing it opens nothing and loads no model; each method opens the shard for that one
    operation and closes it."""

    def __init__(
        self,
        path: Path,
        *,
        embedder: Callable[[], Embedder],
        lock_wait_seconds: float = LOCK_WAIT_SECONDS,
    ) -> None:
        self.path = path
        self._make_embedder = embedder
        self._embedder: Embedder | None = None
        self._lock_wait_seconds = lock_wait_seconds
        self._bm25: Any = None

    @property
    def location(self) -> str:
        return str(self.path)

    @property
    def embedder(self) -> Embedder:
        """The embedder, made on first use: a store that only lists or erases never loads a model."""
        if self._embedder is None:
            self._embedder = self._make_embedder()
        return self._embedder

    # -- opening -------------------------------------------------------------------------------

    def _absent(self) -> bool:
        if is_memory_store(self.path) or _sibling(self.path, ".edge-ready").exists():
            return False
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
    def _session(self, *, create: bool) -> Iterator[EdgeShard | None]:
        """The open shard for one operation, made first if `create` (else None when there is none)."""
        with self._locked(create=create) as present:
            if not present:
                yield None
                return
            shard = _load(self.path)
            try:
                yield shard
            finally:
                shard.close()
                private_tree(self.path)  # Edge creates its files with the umask's modes

    def _settle(self, *, create: bool) -> None:
        """Finish what a killed command left (holding the folder), or make the shard if `create`.

        `<path>.edge-ready` is a complete shard: installed when the store is missing (killed in the
        middle of a swap), stale when the store is there (killed before one: another process may
        have written since). `<path>.edge-old` is a replaced shard still to delete."""
        ready, old = _sibling(self.path, ".edge-ready"), _sibling(self.path, ".edge-old")
        if not ready.exists() and not is_memory_store(self.path) and is_memory_store(old):
            os.rename(old, self.path)  # killed before the re-made shard was complete: keep the old
            fsync_dir(self.path.parent)
        if ready.exists():
            if is_memory_store(self.path):
                shutil.rmtree(ready)
            else:
                if self.path.exists():
                    shutil.rmtree(self.path)  # an empty folder or a shard without its record
                os.rename(ready, self.path)
                fsync_dir(self.path.parent)
        if old.exists() and is_memory_store(self.path):
            shutil.rmtree(old, ignore_errors=True)
        if is_memory_store(self.path) or not create:
            return
        if self.path.exists() and any(self.path.iterdir()):
            raise UserError(
                f"{self.path} holds no memory store; move it away, or point MA_DATA_DIR elsewhere"
            )
        embedder = self.embedder
        _install(self._build([], name=embedder.name, dimension=embedder.dimension), self.path)

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

        new = _sibling(self.path, ".edge-new")
        shutil.rmtree(new, ignore_errors=True)
        private_dir(new, WHAT)
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
        private_tree(new)
        return new

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
        old = _sibling(self.path, ".edge-old")
        shutil.rmtree(old, ignore_errors=True)
        os.rename(self.path, old)
        _install(new, self.path)
        shutil.rmtree(old, ignore_errors=True)
        for marker in self._owners_dir().glob("*"):
            if marker.name not in {_owner_marker(owner) for owner in owners}:
                marker.unlink(missing_ok=True)

    def _check_embedder(self) -> None:
        meta = read_meta(self.path)
        embedder = self.embedder
        if meta.get("embedder") != embedder.name or meta.get("dimension") != embedder.dimension:
            raise UserError(
                f"the memories in {self.path} were embedded with {meta.get('embedder')} "
                f"({meta.get('dimension')} dimensions), not {embedder.name} ({embedder.dimension}): "
                "run `market-analyst memories reindex` to embed them again"
            )

    # -- vectors -------------------------------------------------------------------------------

    def _sparse(self) -> Any:
        if self._bm25 is None:
            from qdrant_edge import Bm25

            self._bm25 = Bm25()
        return self._bm25

    def _points(self, memories: Sequence[Memory]) -> list[Any]:
        from qdrant_edge import Point

        dense = self.embedder.embed([memory.text for memory in memories])
        bm25 = self._sparse()
        return [
            Point(memory.id, {"dense": vector, "bm25": bm25.embed_document(memory.text)}, to_payload(memory))
            for memory, vector in zip(memories, dense, strict=True)
        ]

    # -- the port ------------------------------------------------------------------------------

    # -- who has memories: a marker file per owner, so an owner without any costs no open ---------

    def _owners_dir(self) -> Path:
        return self.path.with_name(f".{self.path.name}.owners")

    def _may_have(self, owner: str) -> bool:
        """False only if `owner` has no memory: a marker is made before an owner's first memory is
        written and removed only after their last one went (by a rewrite that saw none left)."""
        return (self._owners_dir() / _owner_marker(owner)).exists()

    def _mark(self, owners: set[str]) -> None:
        folder = private_dir(self._owners_dir(), WHAT)
        made = False
        for owner in owners:
            marker = folder / _owner_marker(owner)
            if not marker.exists():
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600)
                os.fsync(fd)
                os.close(fd)
                made = True
        if made:
            fsync_dir(folder)

    def write(self, memories: Sequence[Memory]) -> None:
        from qdrant_edge import UpdateOperation

        if not memories:
            return
        points = self._points(memories)
        with self._session(create=True) as shard:
            assert shard is not None
            self._check_embedder()
            self._mark({memory.owner for memory in memories})  # before the points: see `_may_have`
            for start in range(0, len(points), WRITE_BATCH):
                shard.update(UpdateOperation.upsert_points(points[start : start + WRITE_BATCH]))

    def has_memories(self, owner: str) -> bool:
        from qdrant_edge import CountRequest

        owner = validate_user_id(owner)
        if self._absent() or not self._may_have(owner):
            return False
        with self._session(create=False) as shard:
            return (
                shard is not None
                and shard.count(CountRequest(filter=owner_filter(owner, live_only=False), exact=True)) > 0
            )

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
        """`recall` before the character budget, with the engine's score of each memory (for
        evaluation and tests of the fusion)."""

        owner = validate_user_id(owner)
        if limit <= 0 or self._absent() or not self._may_have(owner):
            return []  # no shard opened, no model loaded
        # Embedded before the shard is opened, so the folder is held only for the query.
        dense = None if mode == "bm25" else self.embedder.embed([query])[0]
        request = edge_query(
            owner=owner,
            dense=dense,
            sparse=self._sparse().embed_query(query),
            mode=mode,
            limit=limit,
            ticker=ticker,
            now=now or datetime.now(UTC),
        )
        with self._session(create=False) as shard:
            if shard is None:
                return []
            if dense is not None:
                self._check_embedder()
            found = shard.query(request)
        ranked = [(from_payload(point.id, point.payload or {}), point.score) for point in found]
        # The filter already holds these; checked again so no other owner's memory can ever leave.
        return [
            (memory, score) for memory, score in ranked if memory.owner == owner and not memory.superseded
        ]

    def _scroll(self, shard: EdgeShard, flt: Any, *, with_vector: bool = False) -> builtins.list[Any]:
        from qdrant_edge import ScrollRequest

        records: builtins.list[Any] = []
        offset = None
        while True:
            page, offset = shard.scroll(
                ScrollRequest(
                    offset=offset, limit=SCROLL_PAGE, filter=flt, with_payload=True, with_vector=with_vector
                )
            )
            records.extend(page)
            if offset is None or not page:
                return records

    def list(self, owner: str, *, include_superseded: bool = False) -> builtins.list[Memory]:
        owner = validate_user_id(owner)
        if self._absent():
            return []
        with self._session(create=False) as shard:
            if shard is None:
                return []
            records = self._scroll(shard, owner_filter(owner, live_only=not include_superseded))
        memories = [from_payload(record.id, record.payload or {}) for record in records]
        memories = [memory for memory in memories if memory.owner == owner]
        return sorted(memories, key=lambda memory: (memory.created_at, memory.id), reverse=True)

    def _owned(self, shard: EdgeShard, owner: str, memory_id: str) -> Memory | None:
        records = shard.retrieve([memory_id], True, False)
        if not records:
            return None
        memory = from_payload(records[0].id, records[0].payload or {})
        return memory if memory.owner == owner else None

    def get(self, owner: str, memory_id: str) -> Memory | None:
        owner, memory_id = validate_user_id(owner), check_memory_ref(memory_id)
        if self._absent():
            return None
        with self._session(create=False) as shard:
            return None if shard is None else self._owned(shard, owner, memory_id)

    def replace(self, owner: str, old_id: str, new: Memory) -> None:
        from qdrant_edge import UpdateOperation

        owner, old_id = validate_user_id(owner), check_memory_ref(old_id)
        if new.owner != owner:
            raise UserError(f"a memory of {new.owner} cannot replace one of {owner}")
        if new.id == old_id:
            raise UserError(f"memory {old_id} already says that")
        new = new.model_copy(update={"replaces": old_id, "superseded": False})
        if self.get(owner, old_id) is None:
            raise UserError(f"no memory {old_id} for user {owner}")
        points = self._points([new])
        with self._session(create=True) as shard:
            assert shard is not None
            self._check_embedder()
            if self._owned(shard, owner, old_id) is None:  # forgotten meanwhile by another process
                raise UserError(f"no memory {old_id} for user {owner}")
            # The new one first: a crash between the two leaves both live, and a repeat finishes it.
            shard.update(UpdateOperation.upsert_points(points))
            shard.update(UpdateOperation.set_payload([old_id], {"status": SUPERSEDED}))

    def forget(self, owner: str, memory_id: str) -> bool:
        owner, memory_id = validate_user_id(owner), check_memory_ref(memory_id)
        if self._absent():
            return False
        with self._locked(create=False) as present:
            if not present:
                return False
            shard = _load(self.path)
            try:
                if self._owned(shard, owner, memory_id) is None:
                    return False
                self._swap(shard, drop={memory_id})
                return True
            finally:
                shard.close()
                private_tree(self.path)

    def _delete_matching(self, flt: Any) -> int:
        if self._absent():
            return 0
        with self._locked(create=False) as present:
            if not present:
                return 0
            shard = _load(self.path)
            try:
                ids = {str(record.id) for record in self._scroll(shard, flt)}
                if ids:
                    self._swap(shard, drop=ids)
                return len(ids)
            finally:
                shard.close()
                private_tree(self.path)

    def forget_user(self, owner: str) -> int:
        return self._delete_matching(owner_filter(validate_user_id(owner), live_only=False))

    def prune(self, older_than: datetime) -> int:
        return self._delete_matching(_made_before(older_than))

    def count_before(self, older_than: datetime) -> int:
        """How many memories (of every owner) were made before `older_than`: what `prune` would erase."""
        from qdrant_edge import CountRequest

        if self._absent():
            return 0
        with self._session(create=False) as shard:
            return (
                0 if shard is None else shard.count(CountRequest(filter=_made_before(older_than), exact=True))
            )

    def reindex(self) -> int:
        """Embed every memory again with this store's embedder (after a change of model); returns
        how many. The new shard replaces the old one only once it is complete."""
        from qdrant_edge import CountRequest

        if self._absent():
            return 0
        with self._locked(create=False) as present:
            if not present:
                return 0
            shard = _load(self.path)
            try:
                count = shard.count(CountRequest(exact=True))
                self._swap(shard, drop=set(), embed=True)
                return count
            finally:
                shard.close()
                private_tree(self.path)

    def all_points(self) -> builtins.list[dict[str, Any]]:
        """Every point of the collection with its payload and vectors, for checks of what is stored."""
        if self._absent():
            return []
        with self._session(create=False) as shard:
            if shard is None:
                return []
            records = self._scroll(shard, None, with_vector=True)
        return [
            {"id": str(r.id), "payload": dict(r.payload or {}), "vector": _plain(r.vector)} for r in records
        ]


def _owner_marker(owner: str) -> str:
    # A digest, so the folder's listing names nobody.
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


def _made_before(moment: datetime) -> Any:
    from qdrant_edge import FieldCondition, Filter, RangeDateTime

    return Filter(must=[FieldCondition(key="created_at", range=RangeDateTime(lt=iso_z(moment)))])


def _plain(vector: Any) -> Any:
    if isinstance(vector, dict):
        return {name: _plain(value) for name, value in vector.items()}
    if hasattr(vector, "indices"):
        return {"indices": list(vector.indices), "values": list(vector.values)}
    return vector


def _install(new: Path, path: Path) -> None:
    """Rename the complete shard `new` to `path` by way of `<path>.edge-ready` (see `_settle`)."""
    ready = _sibling(path, ".edge-ready")
    os.rename(new, ready)
    fsync_dir(path.parent)
    if path.exists():
        shutil.rmtree(path)  # only ever an empty folder here
    os.rename(ready, path)
    fsync_dir(path.parent)


def _load(path: Path) -> EdgeShard:
    from qdrant_edge import EdgeShard

    try:
        return EdgeShard.load(str(path))
    except Exception as exc:
        if _LOCKED in str(exc):
            raise StoreBusy(str(path)) from None
        raise UserError(f"cannot open {WHAT} {path}: {' '.join(str(exc).split())}") from None
