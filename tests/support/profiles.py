"""Profile stores written and held straight through each engine's own library, as another process,
an earlier version or a corruption would: never through the application's store. `hold_store`
holds a store in a process of its own."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from market_analyst.persistence.profiles.fields import point_id_for
from market_analyst.persistence.profiles.server import COLLECTION
from market_analyst.state import Profile
from tests.support.crashkit import Harness, Held, say

ENGINES = ("edge", "local")


def write_local_mode_folder(path: Path, payloads: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """A folder as `qdrant-client` local mode (earlier versions' store) writes it: each payload in
    the point of the user named first."""
    from qdrant_client import QdrantClient, models

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = QdrantClient(path=str(path))
        try:
            if not client.collection_exists(COLLECTION):
                client.create_collection(COLLECTION, vectors_config={})
            points = [
                models.PointStruct(id=point_id_for(user), vector={}, payload=payload)
                for user, payload in payloads
            ]
            for start in range(0, len(points), 1000):
                client.upsert(COLLECTION, points=points[start : start + 1000])
        finally:
            client.close()


def profile_payloads(users: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """A distinct, valid profile for each user, keyed as `write_local_mode_folder` takes them."""
    return [
        (
            user,
            Profile(
                user_id=user, notes=f"notes of {user}", updated_at="2025-01-01T00:00:00+00:00"
            ).model_dump(),
        )
        for user in users
    ]


def plant(engine: str, path: Path, under_user: str, payload: dict[str, Any]) -> None:
    """Write `payload` into the point of `under_user`, bypassing every check of the application."""
    if engine == "local":
        write_local_mode_folder(path, [(under_user, payload)])
        return
    from qdrant_edge import EdgeShard, Point, UpdateOperation

    shard = EdgeShard.load(str(path))
    try:
        shard.update(UpdateOperation.upsert_points([Point(point_id_for(under_user), {}, payload)]))
    finally:
        shard.close()


def count_points(engine: str, path: Path) -> int:
    """How many points the store at `path` holds."""
    if engine == "local":
        from qdrant_client import QdrantClient

        client = QdrantClient(path=str(path))
        try:
            return client.count(COLLECTION).count
        finally:
            client.close()
    from qdrant_edge import CountRequest, EdgeShard

    shard = EdgeShard.load(str(path))
    try:
        return shard.count(CountRequest(exact=True))
    finally:
        shard.close()


def hold_store(harness: Harness, engine: str, path: Path, seconds: float) -> Held:
    """A real second process (forked by the harness from its pre-imported server) that opens the
    store at `path` and keeps it for `seconds`; returns once the store is held. It says "held", then
    "released" once it lets go."""
    return harness.hold(_hold, (engine, str(path), seconds), until="held")


def _hold(engine: str, path: str, seconds: float, said: str) -> None:
    if engine == "local":
        from qdrant_client import QdrantClient

        store: Any = QdrantClient(path=path)
    else:
        from qdrant_edge import EdgeShard

        store = EdgeShard.load(path)
    say(said, "held")
    time.sleep(seconds)
    store.close()
    say(said, "released")
