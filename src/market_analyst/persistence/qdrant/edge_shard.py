"""A Qdrant Edge shard's life on disk, for every store kept in one: loaded for one operation, built
beside the store, installed by renames, and settled after a kill.

A shard appears under the store's name only by the rename of a complete one, so a `kill -9` at any
moment leaves the old store or the new shard whole, never half of either. Beside the store `<path>`:

- `<path>.edge-new`: a shard being built; what a killed build left (an erasure's copy of every other
  point) is deleted by the next `settle`, that is the store's next opening, or the next build;
- `<path>.edge-ready`: a complete shard on its way in: installed when the store is not complete
  (killed in the middle of an install), stale when it is (killed before one: another process may
  have written since);
- `<path>.edge-old`: a store moved aside by `swap`, put back if its replacement never got in place,
  deleted once it did.

What counts as a complete store is the caller's (`complete`): a shard and whatever the store records
beside its points. Edge reports every failure as a plain `Exception`, so a shard another process
holds is recognised by its message.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from market_analyst.errors import UserError
from market_analyst.files import fsync_dir, private_dir, private_tree
from market_analyst.persistence.store_access import StoreBusy

if TYPE_CHECKING:
    from qdrant_edge import EdgeShard

# Edge writes it when a shard is created; nothing else this application meets has it.
CONFIG_FILE = "edge_config.json"
NEW, READY, OLD = ".edge-new", ".edge-ready", ".edge-old"
_LOCKED = "WouldBlock"


def sibling(path: Path, suffix: str) -> Path:
    """`<path><suffix>`, beside `path`."""
    return path.with_name(path.name + suffix)


def is_shard(path: Path) -> bool:
    """Whether `path` holds a Qdrant Edge shard."""
    return (path / CONFIG_FILE).is_file()


def load(path: Path, *, what: str) -> EdgeShard:
    """Open the shard at `path`; `StoreBusy` while another process holds it, and a `UserError` that
    names `what` for a damaged or unreadable one (the user's to restore)."""
    from qdrant_edge import EdgeShard

    ensure_room(path, what=what, opening=True)
    try:
        return EdgeShard.load(str(path))
    except Exception as exc:
        if _LOCKED in str(exc):
            raise StoreBusy(str(path)) from None
        raise UserError(f"cannot open {what} {path}: {' '.join(str(exc).split())}") from None


# The room a new shard needs, with its copy and some to spare (a new memory store and its copy took
# about 30 MB on tmpfs, and 26 MB free ended the process), beside what the shard it replaces takes.
ROOM_BYTES = 64 << 20


def _allocated(path: Path) -> int:
    """The bytes the files under `path` take on disk (a sparse file counts what it holds)."""
    if not path.is_dir():
        return 0
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*") if p.is_file() and not p.is_symlink())


# The room opening a shard needs: Edge writes its log's segments out as it opens one (on tmpfs a
# new memory store's 28 MB became 60 MB at its next opening, and a full disk ended the process).
OPEN_ROOM_BYTES = 64 << 20


class NoRoom(UserError):
    """The disk lacks the room a shard needs: nothing was opened or changed (not damage)."""


def ensure_room(path: Path, *, what: str, opening: bool = False) -> None:
    """Refuse in one line, before Edge maps anything, when the disk holding `path` has less room
    than a new shard beside the one at `path` would take (or, `opening`, than opening it takes):
    Edge maps its files, and a disk that fills under a mapping ends the process with SIGBUS, with
    no message and no exit code."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    stats = os.statvfs(existing)
    free = stats.f_bavail * stats.f_frsize
    need = OPEN_ROOM_BYTES if opening else ROOM_BYTES + _allocated(path)
    if free < need:
        doing = "opening" if opening else "building"
        raise NoRoom(
            f"the disk holding {what} {path} has {free / 2**20:.0f} MB free, and {doing} its shard "
            f"needs about {need / 2**20:.0f} MB (Qdrant Edge maps its files): the store was not changed; "
            "free some space and run the command again"
        )


def build_beside(path: Path, fill: Callable[[Path], None], *, what: str) -> Path:
    """A complete shard in `<path>.edge-new`, made owner-only: `fill` creates it in that empty
    folder and closes it. Returns the folder. Refused first when the disk lacks the room."""
    new = sibling(path, NEW)
    shutil.rmtree(new, ignore_errors=True)
    ensure_room(path, what=what)
    fill(private_dir(new, what))
    private_tree(new)
    return new


def mark_ready(new: Path, path: Path) -> Path:
    """Rename the complete shard `new` to `<path>.edge-ready`: from here on it is known complete."""
    ready = sibling(path, READY)
    os.rename(new, ready)
    fsync_dir(path.parent)
    return ready


def put_in_place(ready: Path, path: Path) -> None:
    """Rename the complete shard `ready` to `path`, deleting what is there first: never a complete
    store (an empty folder, or a shard without what its store records beside the points)."""
    if path.exists():
        shutil.rmtree(path)
    os.rename(ready, path)
    fsync_dir(path.parent)


def install(new: Path, path: Path) -> None:
    """Put the complete shard `new` at `path` by way of `<path>.edge-ready` (see `settle`)."""
    put_in_place(mark_ready(new, path), path)


def swap(path: Path, new: Path) -> None:
    """Replace the store at `path` by the complete shard `new`: the store moves to `<path>.edge-old`
    until `new` is in place, then goes."""
    old = sibling(path, OLD)
    shutil.rmtree(old, ignore_errors=True)
    os.rename(path, old)
    install(new, path)
    shutil.rmtree(old, ignore_errors=True)


def settle(path: Path, *, complete: Callable[[Path], bool]) -> None:
    """Finish what a killed command left beside the store at `path` (the caller holds the folder):
    delete a shard it was building, put back a store moved aside whose replacement never arrived,
    install a ready shard where the store is not complete, and delete what is stale."""
    ready, old = sibling(path, READY), sibling(path, OLD)
    # No one builds while the caller holds the folder: a shard half built is a killed command's.
    shutil.rmtree(sibling(path, NEW), ignore_errors=True)
    if not ready.exists() and not complete(path) and complete(old):
        os.rename(old, path)  # killed before the new shard was complete: keep the old one
        fsync_dir(path.parent)
    if ready.exists():
        if complete(path):
            shutil.rmtree(ready)
        else:
            put_in_place(ready, path)
    if old.exists() and complete(path):
        shutil.rmtree(old, ignore_errors=True)
