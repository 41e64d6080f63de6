"""Folders that `qdrant-client` local mode writes: the engine of `MA_PROFILE_STORE=local` (for platforms
without an Edge wheel), and earlier versions' default, read once to migrate (`edge_setup`).

`qdrant_client` costs about a second to import, so it is imported only inside these functions.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from market_analyst.persistence.profiles.base import StoredPoint
from market_analyst.persistence.profiles.server import COLLECTION
from market_analyst.persistence.store_access import StoreBusy

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

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
