"""Memories in a Qdrant Edge shard in the data directory: Qdrant's engine in-process.

One shard holds every owner's memories: a dense vector (`dense`, the embedder's) and a BM25 sparse
vector (`bm25`, IDF-weighted by the engine) per point, keyword indexes on `owner` and `ticker`, a
datetime index on `created_at`. Every read is filtered by owner, and an owner without memories costs
no open at all (`owners`).

One folder, `memories/`, is the whole store:

- `shard/`: the Edge shard, with the record of its embedder (`META_FILE`: vectors are only ever
  written or compared under the same embedder) and its manifest (`manifest`: how many memories it
  holds, per owner, and a digest of their IDs);
- `owners/`: the owners' markers;
- `previous/`: a copy of the shard as the last change that passed its check left it (sparse: it
  takes on disk what the shard does), which `restore` puts back;
- `damaged/`: the shards `restore` moved aside, until the next erasure removes them.

Every opening compares the manifest with the engine's exact count, and every command that writes or
erases first reads every point and compares the digest: a shard that fails is refused in one line
(`manifest.StoreDamaged`, exit 2), and nothing is written into it, erased from it or rebuilt from it.
An engine error (Edge reports a damaged file as an exception, some as a panic) is refused the same
way.

Edge admits one process per folder, so, like the profile store, each operation holds a lock file
beside the store from before it opens until its files are owner-only after it closed, and a command
that finds it held waits a few seconds (`store_access`). Embedding happens outside the lock.

A shard is made, or re-made by an erasure or `reindex`, beside the shard and renamed into place once
complete (`qdrant.edge_shard`), so a `kill -9` leaves the old shard or the new one, never half of
either. An earlier release kept the shard itself in `memories/` and the markers beside it: the first
opening moves both in (`_upgrade`) and records the manifest of what the shard holds.
"""

from __future__ import annotations

import builtins
import copy
import json
import os
import shutil
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from market_analyst.errors import UserError
from market_analyst.files import copy_sparse_tree, fsync_dir, private_dir, private_tree, refuse_under_file
from market_analyst.persistence.memory import manifest
from market_analyst.persistence.memory.base import BaseMemoryStore, Recall, every_page
from market_analyst.persistence.memory.embedder import Embedder
from market_analyst.persistence.memory.manifest import Manifest, StoreDamaged
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
from market_analyst.persistence.store_access import LOCK_WAIT_SECONDS, StoreBusy, lock_file, wait_while_busy
from market_analyst.state import TRAIL_KINDS, Memory

if TYPE_CHECKING:
    from qdrant_edge import EdgeShard

WHAT = "the memory store"
META_FILE = "memory_embedder.json"
SHARD, OWNERS, PREVIOUS, DAMAGED = "shard", "owners", "previous", "damaged"
# Left in a shard an earlier release made (it has no manifest) while it is moved in: its manifest is
# then made from what the engine reports, once.
UPGRADED = "upgraded-from-unrecorded"
WRITE_BATCH = 512  # points per update: one log entry each, all of it or none after a crash
SCROLL_PAGE = 1024
# The markers' key of a store opened without the records secret (tests, benchmarks): a store the
# application opens names its owners under a key of its own records (`deps.open_memory`).
UNSHARED_MARKER_KEY = marker_key("")


def is_memory_store(path: Path) -> bool:
    """Whether `path` holds a complete memory shard: the shard, the record of its embedder, and its
    manifest (or the mark of one an earlier release made, whose manifest is still to be recorded)."""
    return (
        edge_shard.is_shard(path)
        and (path / META_FILE).is_file()
        and ((path / manifest.MANIFEST).is_file() or (path / UPGRADED).is_file())
    )


def _earlier_release_store(path: Path) -> bool:
    """Whether `path` holds a shard as an earlier release kept it (the shard itself is the folder)."""
    return edge_shard.is_shard(path) and (path / META_FILE).is_file()


def read_meta(path: Path) -> dict[str, Any]:
    """What the shard at `path` records about its dense vectors; `StoreDamaged` when it cannot say."""
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StoreDamaged(path.parent, f"the record of its embedder is not readable: {exc}") from None
    if not isinstance(meta, dict) or not {"embedder", "dimension"} <= meta.keys():
        raise StoreDamaged(path.parent, "the record of its embedder is not readable")
    return dict(meta)


@dataclass
class Opened:
    """A shard open for one operation, with the manifest it was checked against; `changed` once the
    operation changed what it holds (then a copy is kept as `previous/`)."""

    shard: EdgeShard
    manifest: Manifest
    changed: bool = False


def _engine_failure(exc: BaseException) -> bool:
    """Whether `exc` is the engine's: an exception, or a Rust panic (pyo3 raises those as a
    `BaseException`), but never an interrupt or an exit."""
    return not isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit, UserError, StoreBusy))


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
        self.shard_path = path / SHARD
        self._lock_wait_seconds = lock_wait_seconds
        self._owners = OwnerMarkers(path / OWNERS, what=WHAT, key=marker_key)

    def at_once(self) -> EdgeMemoryStore:
        _ = self.embedder  # made (not loaded) first, so that both share it and load its model once
        at_once = copy.copy(self)  # the same embedder and markers, no wait for the folder
        at_once._lock_wait_seconds = 0.0
        return at_once

    # -- opening -------------------------------------------------------------------------------

    def _absent(self) -> bool:
        """Whether there is no store at all (so every read is empty). A store whose shard is gone but
        whose copy or owners remain is not absent: it is damaged, and opening it says so."""
        shard = self.shard_path
        if shard.exists() or any(
            edge_shard.sibling(shard, suffix).exists() for suffix in (edge_shard.READY, edge_shard.OLD)
        ):
            return False
        if self._earlier_layout_left():
            return False
        if (self.path / PREVIOUS).exists() or self._owners.any_marked():
            return False
        refuse_under_file(self.path, WHAT)
        return True

    def _earlier_layout_left(self) -> bool:
        path = self.path
        return (
            edge_shard.is_shard(path)
            or edge_shard.sibling(path, edge_shard.READY).exists()
            or edge_shard.sibling(path, edge_shard.OLD).exists()
            or self._parked.exists()
        )

    @property
    def _parked(self) -> Path:
        return self.path.with_name(f".{self.path.name}.upgrading")

    @contextmanager
    def _locked(self, *, create: bool) -> Iterator[bool]:
        """Hold the folder for one operation, with any interrupted swap finished (and the shard made
        first if `create`); yields whether there is a complete shard."""

        def attempt() -> tuple[ExitStack, bool]:
            with ExitStack() as held:
                # Held from before the shard opens until its files are owner-only after it closed:
                # Edge releases its own lock (the log's) while the shard still finishes closing.
                held.enter_context(
                    lock_file(self.path.with_name(f".{self.path.name}.session.lock"), what=WHAT)
                )
                self._settle(create=create)
                return held.pop_all(), is_memory_store(self.shard_path)

        held, present = wait_while_busy(
            attempt, location=self.location, seconds=self._lock_wait_seconds, what=WHAT
        )
        with held:
            yield present

    @contextmanager
    def _session(self, *, create: bool = False, full: bool = False) -> Iterator[Opened | None]:
        """The open shard for one operation, checked against its manifest (every point read first
        when `full`: what every write and erasure asks), made first if `create`; else None when there
        is no store (without taking the folder when nothing is there at all). `StoreDamaged` when the
        check fails or the engine does, before or during the operation."""
        if not create and self._absent():
            yield None
            return
        with self._locked(create=create) as present:
            if not present:
                if self._absent():
                    yield None
                    return
                raise StoreDamaged(self.path, "its shard, or the record of its embedder, is missing")
            try:
                shard = self._engine(lambda: edge_shard.load(self.shard_path, what=WHAT))
            except (StoreDamaged, edge_shard.NoRoom):
                raise
            except UserError as exc:  # the engine could not open it
                raise StoreDamaged(self.path, str(exc)) from None
            opened: Opened | None = None
            try:
                checked, recorded = self._engine(lambda: self._verify(shard, full=full))
                # A store checked in full with no copy yet (killed before its copy was made): one now.
                uncopied = full and not (self.path / PREVIOUS).exists()
                opened = Opened(shard, checked, changed=recorded or uncopied)
                if not self._owners.current():  # an earlier release's markers, or another key's
                    self._owners.rebuild(self._shard_owners(shard))
                    self._record_owners(shard, opened)
                try:
                    yield opened
                except BaseException as exc:
                    if _engine_failure(exc):
                        raise StoreDamaged(self.path, f"the engine failed: {exc}") from None
                    raise
            finally:
                try:
                    shard.close()
                except BaseException as exc:  # a panic while closing a damaged shard
                    if not _engine_failure(exc):
                        raise
                private_tree(self.shard_path)  # Edge creates its files with the umask's modes
            if opened is not None and opened.changed:
                self._keep_copy()

    def _engine(self, call: Callable[[], Any]) -> Any:
        """`call()`, with the engine's failures (an exception or a panic) refused as damage."""
        try:
            return call()
        except BaseException as exc:
            if _engine_failure(exc):
                raise StoreDamaged(self.path, f"the engine failed: {exc}") from None
            raise

    def _settle(self, *, create: bool) -> None:
        """Finish what a killed command left (holding the folder), or make the shard if `create`."""
        self._upgrade()
        edge_shard.settle(self.shard_path, complete=is_memory_store)
        if is_memory_store(self.shard_path) or not create:
            return
        if self.shard_path.exists() and any(self.shard_path.iterdir()):
            raise StoreDamaged(self.path, "its shard, or the record of its embedder, is missing")
        if (self.path / PREVIOUS).exists() or self._owners.any_marked():
            raise StoreDamaged(self.path, "its shard is missing")
        if self.path.exists() and any(p.name not in (OWNERS,) for p in self.path.iterdir()):
            raise UserError(
                f"{self.path} holds no memory store; move it away, or point MA_DATA_DIR elsewhere"
            )
        embedder = self.embedder
        private_dir(self.path, WHAT)
        edge_shard.install(self._build([], name=embedder.name, dimension=embedder.dimension), self.shard_path)

    def _upgrade(self) -> None:
        """Move a store an earlier release kept (the shard as `memories/`, the markers beside it)
        into this layout, by renames a kill can interrupt anywhere: the next opening goes on."""
        path, parked = self.path, self._parked
        if not self._earlier_layout_left():
            return
        edge_shard.settle(path, complete=_earlier_release_store)
        if _earlier_release_store(path):
            (path / UPGRADED).touch(mode=0o600)
            os.rename(path, parked)
            fsync_dir(path.parent)
        if parked.exists():
            private_dir(path, WHAT)
            if self.shard_path.exists():
                raise StoreDamaged(path, f"both {parked} and {self.shard_path} hold a shard: keep one")
            os.rename(parked, self.shard_path)
            fsync_dir(path)
        markers = path.with_name(f".{path.name}.owners")
        if markers.exists() and not (path / OWNERS).exists():
            os.rename(markers, path / OWNERS)
            fsync_dir(path)

    # -- the manifest ----------------------------------------------------------------------------

    def _verify(self, shard: EdgeShard, *, full: bool) -> tuple[Manifest, bool]:
        """The manifest the shard is checked against (`StoreDamaged` when it fails): its count on
        every opening, every point's ID, owner and vectors when `full`. Settles a change a kill
        interrupted (`manifest`), and records the manifest of an earlier release's shard; says
        whether it recorded one (then a copy is kept, as after a change)."""
        from qdrant_edge import CountRequest

        folder = self.shard_path
        read_meta(folder)
        recorded = manifest.read(folder)
        if recorded is None:
            if not (folder / UPGRADED).is_file():
                raise StoreDamaged(self.path, "its manifest is missing")
            made, _ = self._engine_manifest(shard)  # nothing to compare it with: it is what it holds
            manifest.write(folder, made)
            (folder / UPGRADED).unlink()
            return made, True
        expected, _ = recorded
        pending = manifest.read(folder, manifest.NEXT)
        if pending is not None:
            return self._settle_next(shard, expected, pending[1].get("adding") or {}), True
        if full:
            engine, _ = self._engine_manifest(shard)
            problem = expected.differs(engine) if self._owners.current() else _ids_differ(expected, engine)
        else:
            count = shard.count(CountRequest(exact=True))
            problem = None if count == expected.points else expected.differs(Manifest(points=count))
        if problem:
            raise StoreDamaged(self.path, problem)
        return expected, False

    def _settle_next(self, shard: EdgeShard, before: Manifest, adding: dict[str, str]) -> Manifest:
        """After a kill inside a change in place: the shard must hold what it held before plus some
        of the points the change adds; the manifest then records exactly that."""
        engine, owners_of = self._engine_manifest(shard)
        added = {point_id: owner for point_id, owner in adding.items() if point_id in owners_of}
        kept = Manifest.of((point, owner) for point, owner in owners_of.items() if point not in added)
        problem = before.differs(kept) if self._owners.current() else _ids_differ(before, kept)
        if problem:
            raise StoreDamaged(self.path, problem)
        settled = before.adding(added)
        manifest.write(self.shard_path, settled)
        (self.shard_path / manifest.NEXT).unlink(missing_ok=True)
        return settled

    def _engine_manifest(self, shard: EdgeShard) -> tuple[Manifest, dict[str, str]]:
        """What the engine holds, read point by point (payloads and vectors, so that a damaged page
        fails here), as a manifest and each ID's owner marker."""
        owners_of: dict[str, str] = {}
        for record in self._scroll(shard, None, with_vectors=True):
            vectors = record.vector or {}
            if not isinstance(vectors, dict) or not {"dense", "bm25"} <= vectors.keys():
                raise StoreDamaged(self.path, f"memory {record.id} has lost its vectors")
            try:
                memory = from_payload(record.id, dict(record.payload or {}))
            except (KeyError, TypeError, ValueError) as exc:
                raise StoreDamaged(self.path, f"memory {record.id} is not readable: {exc}") from None
            owners_of[str(record.id)] = self._owners.name_of(memory.owner)
        return Manifest.of(owners_of.items()), owners_of

    def _record_owners(self, shard: EdgeShard, opened: Opened) -> None:
        """After the markers were made under another key: the manifest names the owners the same way
        (its points and IDs already checked)."""
        engine, _ = self._engine_manifest(shard)
        if _ids_differ(opened.manifest, engine):
            raise StoreDamaged(self.path, str(_ids_differ(opened.manifest, engine)))
        manifest.write(self.shard_path, engine)
        opened.manifest = engine

    def _change_in_place(self, opened: Opened, adding: dict[str, str], change: Callable[[], None]) -> None:
        """Make `change` (which adds the points `adding` names, ID -> owner marker) with the
        manifest recorded first as it will be after, then committed."""
        after = opened.manifest.adding(adding)
        manifest.write(self.shard_path, after, manifest.NEXT, adding=adding)
        opened.changed = True
        change()
        manifest.commit_next(self.shard_path)
        opened.manifest = after

    # -- the copy, and restoring it --------------------------------------------------------------

    def _keep_copy(self) -> None:
        """Copy the shard, as the change that passed its check left it, to `previous/` (the older
        copy goes once the new one is complete)."""
        previous, new, old = (self.path / name for name in (PREVIOUS, PREVIOUS + ".new", PREVIOUS + ".old"))
        shutil.rmtree(new, ignore_errors=True)
        try:
            copy_sparse_tree(self.shard_path, new)
        except (OSError, shutil.Error) as exc:  # a full disk: the change stands, its copy does not
            shutil.rmtree(new, ignore_errors=True)
            why = _why(exc)
            raise UserError(
                f"{WHAT} in {self.path} was changed, but its copy for 'memories restore' could not be "
                f"made ({why}); the copy there is of an earlier change: free some space"
            ) from None
        if previous.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.rename(previous, old)
        os.rename(new, previous)
        fsync_dir(self.path)
        shutil.rmtree(old, ignore_errors=True)

    def _drop_copies(self) -> None:
        """Before an erasure: no copy may keep what it erases (the new copy is made after it)."""
        for name in (PREVIOUS, PREVIOUS + ".new", PREVIOUS + ".old", DAMAGED):
            shutil.rmtree(self.path / name, ignore_errors=True)
        if self.path.exists():
            fsync_dir(self.path)

    def _check_copy(self, folder: Path) -> Manifest:
        """The manifest of the copy in `folder`, every point checked against it; `StoreDamaged` when
        it fails."""
        from qdrant_edge import EdgeShard

        if not is_memory_store(folder) or manifest.read(folder) is None:
            raise StoreDamaged(folder, "it is not a complete copy")
        recorded, _ = manifest.read(folder) or (Manifest(), {})
        read_meta(folder)
        edge_shard.ensure_room(folder, what=WHAT, opening=True)
        shard = self._engine(lambda: EdgeShard.load(str(folder)))
        try:
            engine, _ = self._engine(lambda: self._engine_manifest(shard))
        finally:
            self._engine(shard.close)
        problem = _ids_differ(recorded, engine)
        if problem:
            raise StoreDamaged(folder, problem)
        return recorded

    def verify(self) -> None:
        with self._session(full=True):
            pass

    def check(self) -> dict[str, Any]:
        """What `memories check` reports: whether the store passes its full check (every point read
        and compared with the manifest), how many memories of how many users it holds, and the same
        for the copy `restore` would put back."""
        report: dict[str, Any] = {"store": str(self.path), "ok": True, "problem": None, "memories": 0}
        try:
            with self._session(full=True) as opened:
                if opened is not None:
                    report["memories"] = opened.manifest.points
                    report["users"] = sum(1 for count in opened.manifest.owners.values() if count)
        except StoreDamaged as exc:
            report |= {"ok": False, "problem": exc.why}
        previous = self.path / PREVIOUS
        report["previous"] = None
        if previous.exists():
            try:
                copy_ok = self._check_copy(previous)
                report["previous"] = {"ok": True, "memories": copy_ok.points, "problem": None}
            except StoreDamaged as exc:
                report["previous"] = {"ok": False, "memories": None, "problem": exc.why}
        return report

    def restore(self) -> dict[str, Any]:
        """Put the copy in `previous/` back in place of a shard that fails its check; the damaged
        shard moves to `damaged/` (until the next erasure). Refuses when the store passes its check
        (nothing to restore) or the copy does not."""
        report = self.check()
        if report["ok"]:
            return {"restored": False, "memories": report["memories"], "kept": None}
        previous = self.path / PREVIOUS
        if not previous.exists():
            raise UserError(f"{WHAT} in {self.path} fails its check and has no copy to restore from")

        def attempt() -> dict[str, Any]:
            with lock_file(self.path.with_name(f".{self.path.name}.session.lock"), what=WHAT):
                copy = self._check_copy(previous)
                stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
                kept = private_dir(self.path / DAMAGED, WHAT) / stamp
                new = edge_shard.sibling(self.shard_path, edge_shard.NEW)
                shutil.rmtree(new, ignore_errors=True)
                copy_sparse_tree(previous, new)
                if self.shard_path.exists():
                    os.rename(self.shard_path, kept)
                    fsync_dir(self.path)
                edge_shard.install(new, self.shard_path)
                moved = str(kept) if kept.exists() else None
                return {"restored": True, "memories": copy.points, "kept": moved}

        return wait_while_busy(attempt, location=self.location, seconds=self._lock_wait_seconds, what=WHAT)

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
        from qdrant_edge import Memory as Placement

        holds = Manifest()

        def fill(new: Path) -> None:
            # Both vector stores `Cold` (read through the page cache as a query needs them): the
            # defaults read every dense vector in (`Cached`) and build the sparse index in memory
            # from every stored vector (`Pinned`) at each opening, and a command opens the shard
            # for each operation (see `make bench BENCH_ARGS=memory`).
            config = EdgeConfig(
                vectors={
                    "dense": EdgeVectorParams(size=dimension, distance=Distance.Cosine, memory=Placement.Cold)
                },
                sparse_vectors={"bm25": EdgeSparseVectorParams(modifier=Modifier.Idf, memory=Placement.Cold)},
            )
            shard = EdgeShard.create(str(new), config)  # the write-ahead log stays on: it is the lock
            try:
                for field, kind in (
                    ("owner", PayloadSchemaType.Keyword),
                    ("status", PayloadSchemaType.Keyword),
                    ("ticker", PayloadSchemaType.Keyword),
                    ("kind", PayloadSchemaType.Keyword),
                    ("created_at", PayloadSchemaType.Datetime),
                ):
                    shard.update(UpdateOperation.create_field_index(field, kind))
                for page in pages:
                    if page:
                        shard.update(UpdateOperation.upsert_points(list(page)))
                        for point in page:
                            holds.add(str(point.id), self._owners.name_of(str(point.payload["owner"])))
            finally:
                shard.close()
            meta = {"version": META_VERSION, "embedder": name, "dimension": dimension}
            (new / META_FILE).write_text(json.dumps(meta), encoding="utf-8")
            manifest.write(new, holds)

        return edge_shard.build_beside(self.shard_path, fill, what=WHAT)

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

    def _swap(self, opened: Opened, *, drop: set[str], embed: bool = False) -> None:
        """Replace the open shard (closed here) by a new one without the points in `drop`.

        Erasing by rewriting, not by deleting in place: Edge's delete only hides a point, and its
        text stays in the segment files and the write-ahead log until they are overwritten. The new
        shard holds the other points' payloads and vectors exactly as they were, and a manifest of
        them; the copies go first, so none keeps what is erased (a new copy is made after)."""
        meta = read_meta(self.shard_path)
        name, dimension = (
            (self.embedder.name, self.embedder.dimension) if embed else (meta["embedder"], meta["dimension"])
        )
        shard = opened.shard
        try:
            owners: set[str] = set()
            pages = self._rewrite(shard, drop=drop, owners=owners, embed=embed)
            new = self._build(pages, name=name, dimension=dimension)
        finally:
            shard.close()
        if drop:
            self._drop_copies()
        opened.changed = True
        edge_shard.swap(self.shard_path, new)
        self._owners.keep_only(owners)

    def _shard_owners(self, shard: EdgeShard) -> set[str]:
        return {str((record.payload or {}).get("owner")) for record in self._scroll(shard, None)}

    def _check_embedder(self) -> None:
        self._refuse_other_embedder(read_meta(self.shard_path), str(self.path))

    def _points(self, memories: Sequence[Memory]) -> builtins.list[Any]:
        from qdrant_edge import Point

        return [
            Point(memory.id, {"dense": dense, "bm25": words}, to_payload(memory))
            for memory, dense, words in self._embedded(memories)
        ]

    # -- the engine's point operations ---------------------------------------------------------

    def _owner_filter(self, owner: str, *, live_only: bool) -> Any:
        return owner_filter(owner, live_only=live_only)

    def _trail_filter(self, owner: str, ticker: str) -> Any:
        from qdrant_edge import FieldCondition, Filter, MatchAny, MatchValue

        return Filter(
            must=[
                *owner_filter(owner, live_only=True).must,  # the binding hands out a copy of the list
                FieldCondition(key="ticker", match=MatchValue(ticker)),
                FieldCondition(key="kind", match=MatchAny(list(TRAIL_KINDS))),
            ]
        )

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
        with self._session() as opened:
            return [] if opened is None else self._scroll(opened.shard, flt, with_vectors=with_vectors)

    def _count_matching(self, flt: Any) -> int:
        from qdrant_edge import CountRequest

        with self._session() as opened:
            return 0 if opened is None else opened.shard.count(CountRequest(filter=flt, exact=True))

    def _erase_matching(self, flt: Any) -> int:
        with self._session(full=True) as opened:
            if opened is None:
                return 0
            ids = {str(record.id) for record in self._scroll(opened.shard, flt)}
            if ids:
                self._swap(opened, drop=ids)
            return len(ids)

    def _search(self, recall: Recall) -> builtins.list[tuple[Memory, float]]:
        if not self._may_have(recall.owner):
            return []  # no shard opened, no model loaded
        # Embedded before the shard is opened, so the folder is held only for the query.
        dense, words = self._query_vectors(recall)
        request = edge_query(recall, dense=dense, sparse=words)
        with self._session() as opened:
            if opened is None:
                return []
            if dense is not None:
                self._check_embedder()
            found = opened.shard.query(request)
            return [(from_payload(point.id, point.payload or {}), point.score) for point in found]

    def _retrieve_many(self, ids: builtins.list[str]) -> builtins.list[Any]:
        with self._session() as opened:
            return [] if opened is None else list(opened.shard.retrieve(list[Any](ids), True, False))

    def _get(self, owner: str, memory_id: str) -> Memory | None:
        with self._session() as opened:
            if opened is None:
                return None
            return self._owned(owner, opened.shard.retrieve([memory_id], True, False))

    def _adding(self, opened: Opened, memories: Sequence[Memory]) -> dict[str, str]:
        """Which of `memories` the shard does not hold yet (ID -> owner marker). A memory ID is
        derived from what it records, its owner among it: one stored under another owner is refused."""
        held = {
            str(record.id): str((record.payload or {}).get("owner"))
            for record in opened.shard.retrieve([memory.id for memory in memories], True, False)
        }
        for memory in memories:
            if memory.id in held and held[memory.id] != memory.owner:
                raise UserError(f"memory {memory.id} is another user's")
        return {m.id: self._owners.name_of(m.owner) for m in memories if m.id not in held}

    def _supersede(self, owner: str, old_id: str, new: Memory) -> None:
        from qdrant_edge import UpdateOperation

        points = self._points([new])
        with self._session(create=True, full=True) as opened:
            assert opened is not None
            self._check_embedder()
            shard = opened.shard
            if self._owned(owner, shard.retrieve([old_id], True, False)) is None:
                raise self._no_memory(owner, old_id)  # forgotten meanwhile by another process

            def change() -> None:
                shard.update(UpdateOperation.upsert_points(points))
                shard.update(UpdateOperation.set_payload([old_id], {"status": SUPERSEDED}))

            self._change_in_place(opened, self._adding(opened, [new]), change)

    def _forget(self, owner: str, memory_id: str, revive: str | None = None) -> bool:
        from qdrant_edge import UpdateOperation

        with self._session(full=True) as opened:
            if opened is None or self._owned(owner, opened.shard.retrieve([memory_id], True, False)) is None:
                return False
            shard = opened.shard
            if revive is not None and self._owned(owner, shard.retrieve([revive], True, False)) is not None:
                shard.update(UpdateOperation.set_payload([revive], {"status": LIVE}))
            self._swap(opened, drop={memory_id})
            return True

    # -- the port's writes ---------------------------------------------------------------------

    def write(self, memories: Sequence[Memory]) -> None:
        from qdrant_edge import UpdateOperation

        if not memories:
            return
        memories = list({memory.id: memory for memory in memories}.values())  # the last of one ID
        points = self._points(memories)
        with self._session(create=True, full=True) as opened:
            assert opened is not None
            self._check_embedder()
            self._owners.mark({memory.owner for memory in memories})  # before the points: see `owners`
            shard = opened.shard

            def change() -> None:
                for start in range(0, len(points), WRITE_BATCH):
                    shard.update(UpdateOperation.upsert_points(points[start : start + WRITE_BATCH]))

            self._change_in_place(opened, self._adding(opened, memories), change)

    def reindex(self) -> int:
        """Embed every memory again with this store's embedder (after a change of model); returns
        how many. The new shard replaces the old one only once it is complete."""
        with self._session(full=True) as opened:
            if opened is None:
                return 0
            count = opened.manifest.points
            self._swap(opened, drop=set(), embed=True)
            return count


def _ids_differ(expected: Manifest, engine: Manifest) -> str | None:
    """What differs in points or IDs (the owners' names aside: they are made under another key)."""
    return expected.differs(Manifest(engine.points, dict(expected.owners), engine.digest))


def _why(exc: BaseException) -> str:
    """What an `OSError` or a `shutil.Error` (a list of (source, target, why)) says, in a few words."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    errors = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
    return str(errors[0][2]) if errors and len(errors[0]) == 3 else str(exc)
