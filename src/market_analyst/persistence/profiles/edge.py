"""Profiles in a Qdrant Edge shard: Qdrant's own engine in-process (`qdrant-edge-py`).

One shard per store, created with the smallest configuration Edge accepts (one sparse vector that no
point uses: profiles carry no embeddings), a keyword index on `user_id`, and its write-ahead log on.
The log is what makes a write survive `kill -9` and what locks the shard to one process: without it,
two writers would silently overwrite each other. A shard is opened for one operation and closed in
a `finally`; closing flushes it. How it is made, installed and migrated to: `edge_setup`.

A deletion rewrites the shard without the point, as memory erasure does: Edge's own delete only hides
a point, whose payload stays in the segments and the write-ahead log until they are overwritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from market_analyst.persistence.profiles.base import UPSERT_BATCH, ProfileSession, StoredPoint
from market_analyst.persistence.qdrant import edge_shard
from market_analyst.persistence.store_access import lock_file

WHAT = "the Qdrant Edge store"

if TYPE_CHECKING:
    from qdrant_edge import EdgeShard


def load_shard(path: Path) -> EdgeShard:
    """Open the shard at `path` (it must be one: see `edge_shard.is_shard`); `StoreBusy` while another
    process holds it."""
    # A damaged or unreadable shard is the user's to restore (the local-mode backup, if any, is whole).
    return edge_shard.load(path, what=WHAT)


def build_shard(path: Path, points: Sequence[StoredPoint]) -> None:
    """Create a shard in the empty directory `path` holding exactly `points`, check it holds them
    all, and close it (which flushes it to disk)."""
    from qdrant_edge import (
        CountRequest,
        EdgeConfig,
        EdgeShard,
        EdgeSparseVectorParams,
        PayloadSchemaType,
        UpdateOperation,
    )

    # The WAL stays at its default, on; see the module docstring.
    shard = EdgeShard.create(str(path), EdgeConfig(sparse_vectors={"unused": EdgeSparseVectorParams()}))
    try:
        shard.update(UpdateOperation.create_field_index("user_id", PayloadSchemaType.Keyword))
        for start in range(0, len(points), UPSERT_BATCH):
            _upsert(shard, points[start : start + UPSERT_BATCH])
        stored = shard.count(CountRequest(exact=True))
        expected = len({str(point_id) for point_id, _ in points})
        if stored != expected:
            raise RuntimeError(f"the new shard in {path} holds {stored} points instead of {expected}")
    finally:
        shard.close()


def _upsert(shard: EdgeShard, points: Sequence[StoredPoint]) -> None:
    from qdrant_edge import Point, UpdateOperation

    # `{}`: no vector at all. One update is one entry in the log: all of it survives a crash, or none.
    batch = [Point(point_id, {}, payload) for point_id, payload in points]
    shard.update(UpdateOperation.upsert_points(batch))


class EdgeSession(ProfileSession):
    """One open Edge shard at `path`, whose folder the opener holds (`session_lock`), and whose
    set-up lock (`setup_lock`) keeps a migration out while a deletion swaps the shard. Get it from
    `ProfileStore.session()`."""

    def __init__(
        self, shard: EdgeShard, path: Path, *, setup_lock: Path, now: Callable[[], datetime]
    ) -> None:
        super().__init__(now=now)
        self._shard = shard
        self._path = path
        self._setup_lock = setup_lock

    def close(self) -> None:
        self._shard.close()

    def _payload(self, point_id: str) -> dict[str, Any] | None:
        records = self._shard.retrieve([point_id], True, False)
        return dict(records[0].payload or {}) if records else None

    def _put(self, points: Sequence[StoredPoint]) -> None:
        _upsert(self._shard, points)

    def _points(self, *, drop: str) -> list[StoredPoint]:
        from qdrant_edge import ScrollRequest

        points: list[StoredPoint] = []
        offset = None
        while True:
            page, offset = self._shard.scroll(
                ScrollRequest(offset=offset, limit=UPSERT_BATCH, with_payload=True, with_vector=False)
            )
            points.extend((str(r.id), dict(r.payload or {})) for r in page if str(r.id) != drop)
            if offset is None or not page:
                return points

    def _remove(self, point_id: str) -> None:
        """Rewrite the shard without `point_id`: built beside, swapped in by renames (a kill leaves
        the old store or the new one, settled by the next opening), then opened again."""
        points = self._points(drop=point_id)
        with lock_file(self._setup_lock):
            new = edge_shard.build_beside(self._path, lambda folder: build_shard(folder, points), what=WHAT)
            self._shard.close()
            try:
                edge_shard.swap(self._path, new)
            finally:
                self._shard = load_shard(self._path)
