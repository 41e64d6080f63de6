"""Profile stores written and held straight through each engine's own library, as another process,
an earlier version or a corruption would: never through the application's store.

    python -m tests.support.profiles hold ENGINE PATH SECONDS

holds a store in a process of its own (prints "held", then "released" when it lets go).
"""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from market_analyst.persistence.profiles.fields import point_id_for
from market_analyst.persistence.profiles.server import COLLECTION
from market_analyst.state import Profile
from tests.support import REPO
from tests.support.cli import clean_environ

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


def hold_store(engine: str, path: Path, seconds: float) -> subprocess.Popen[str]:
    """A real second process that opens the store at `path` and keeps it for `seconds`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.profiles", "hold", engine, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=clean_environ(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "held":
        proc.kill()
        raise AssertionError(f"the holder did not open {path}: {line!r}")
    return proc


def _hold(engine: str, path: str, seconds: float) -> None:
    if engine == "local":
        from qdrant_client import QdrantClient

        store: Any = QdrantClient(path=path)
    else:
        from qdrant_edge import EdgeShard

        store = EdgeShard.load(path)
    print("held", flush=True)
    time.sleep(seconds)
    store.close()
    print("released", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        _hold(sys.argv[2], sys.argv[3], float(sys.argv[4]))
