"""What an Edge memory shard holds, recorded beside its points, so that a damaged shard is noticed
before anything is read from it, written into it or rebuilt from it.

The manifest (`manifest.json`, inside the shard's folder, so it moves with the shard on every swap)
records how many points the shard holds, how many of them each owner has (by the owner's marker name,
a keyed hash: the file names nobody), and a digest of their IDs (the XOR of a hash of each, so a
change updates it without reading the rest). Every opening compares the point count with the
engine's exact count; every command that writes or erases first reads every point (payload and
vectors) and compares all three (`verify`).

A change in place (a write, a replacement) first records what the shard will hold after it
(`manifest.next.json`, with the points it adds), then makes it, then renames the record over the
manifest. A kill between leaves the record: the next opening finds the shard holding the old points
plus some of those the change adds (never others), and records exactly that (`settle_next`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.files import fsync_dir, replace_whole

MANIFEST = "manifest.json"
NEXT = "manifest.next.json"
VERSION = 1


class StoreDamaged(UserError):
    """The memory store fails its check: nothing is read from it, written into it or erased in it."""

    def __init__(self, where: Path | str, why: str) -> None:
        self.why = " ".join(why.split())[:300]
        super().__init__(
            f"the memory store in {where} fails its check ({self.why}); nothing was written or erased: "
            "run `market-analyst memories check`"
        )


def id_hash(point_id: str) -> int:
    return int.from_bytes(hashlib.sha256(str(point_id).encode()).digest()[:16], "big")


@dataclass
class Manifest:
    """Points, points per owner (by marker name), and the XOR digest of the IDs."""

    points: int = 0
    owners: dict[str, int] = field(default_factory=dict)
    digest: int = 0

    @classmethod
    def of(cls, entries: Iterable[tuple[str, str]]) -> Manifest:
        """The manifest of the points `entries` lists as (ID, owner marker)."""
        made = cls()
        for point_id, owner in entries:
            made.add(point_id, owner)
        return made

    def add(self, point_id: str, owner: str) -> None:
        self.points += 1
        self.owners[owner] = self.owners.get(owner, 0) + 1
        self.digest ^= id_hash(point_id)

    def adding(self, entries: Mapping[str, str]) -> Manifest:
        """This manifest with the new points `entries` (ID -> owner marker) added."""
        after = Manifest(self.points, dict(self.owners), self.digest)
        for point_id, owner in entries.items():
            after.add(point_id, owner)
        return after

    def differs(self, other: Manifest) -> str | None:
        """What differs from `other` (the engine's), in words; None when nothing does."""
        if self.points != other.points:
            return f"the manifest records {self.points} memories, the engine reports {other.points}"
        if self.digest != other.digest:
            return "the IDs the engine reports are not those the manifest records"
        if {k: v for k, v in self.owners.items() if v} != {k: v for k, v in other.owners.items() if v}:
            return "the memories per user are not those the manifest records"
        return None

    def to_json(self, **extra: Any) -> dict[str, Any]:
        return {
            "version": VERSION,
            "points": self.points,
            "owners": dict(sorted(self.owners.items())),
            "digest": f"{self.digest:032x}",
            **extra,
        }

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError("not a manifest of this release")
        owners = data["owners"]
        if not isinstance(owners, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in owners.items()
        ):
            raise ValueError("its owners are not counts")
        points = data["points"]
        if not isinstance(points, int) or points < 0:
            raise ValueError("its count is not a count")
        return cls(points, dict(owners), int(str(data["digest"]), 16))


def read(folder: Path, name: str = MANIFEST) -> tuple[Manifest, dict[str, Any]] | None:
    """The manifest `name` in `folder` and its whole record; None when there is none. `StoreDamaged`
    when it cannot be read."""
    path = folder / name
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreDamaged(folder, f"its manifest cannot be read: {exc.strerror}") from None
    try:
        data = json.loads(raw)
        return Manifest.from_json(data), data
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreDamaged(folder, f"its manifest {name} is not readable: {exc}") from None


def write(folder: Path, manifest: Manifest, name: str = MANIFEST, **extra: Any) -> None:
    """Write `manifest` as `name` in `folder` whole (a temporary file, synced, renamed, 0600)."""
    replace_whole(folder / name, json.dumps(manifest.to_json(**extra)).encode())


def commit_next(folder: Path) -> None:
    """The change recorded in `NEXT` is made: it becomes the manifest."""
    os.replace(folder / NEXT, folder / MANIFEST)
    fsync_dir(folder)
