"""Bringing the embedded profile folder to a complete Qdrant Edge shard: created on first write, or
migrated once from a folder that `qdrant-client` local mode wrote (earlier versions' default).

A shard only ever appears under the store's name by a rename of a finished one (`qdrant.edge_shard`),
so a `kill -9` at any moment leaves either the old folder readable or the new shard complete, and the
next command finishes or redoes the job. The migration's steps, under an exclusive lock file beside
the store:

1. read every point of the local-mode folder, holding `qdrant-client`'s own lock on it;
2. build a shard with them in `<store>.edge-new` (a leftover from a killed attempt is deleted first);
3. rename it to `<store>.edge-ready`: from here on it is known complete;
4. rename the old folder to `<store>.local-mode-backup` (kept: nothing is deleted);
5. rename `<store>.edge-ready` to the store's name.

A command that finds the store missing but `<store>.edge-ready` present (killed between 4 and 5)
does step 5. One that finds the local-mode folder still in place starts again from step 1: the
folder is the truth until step 4. Processes using local mode (`MA_PROFILE_STORE=local`) hold the
same lock file shared, so a migration never runs under them.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from market_analyst.errors import UserError
from market_analyst.files import fsync_dir, private_tree
from market_analyst.persistence.profiles.edge import build_shard
from market_analyst.persistence.profiles.local_mode import all_points, is_local_mode_folder, open_local_client
from market_analyst.persistence.qdrant import edge_shard
from market_analyst.persistence.store_access import lock_file

WHAT = "the profile store"

# The migration's steps 3 and 5 by name: where its kill tests stop it.
_mark_ready = edge_shard.mark_ready
_install = edge_shard.put_in_place


@dataclass(frozen=True)
class Migration:
    """What moving a local-mode folder to Qdrant Edge did; `backup` is None when there was nothing
    to move."""

    store: Path
    moved: int = 0
    backup: Path | None = None


def setup_lock_path(path: Path) -> Path:
    """The lock file that creating, migrating and local-mode use of the store at `path` share."""
    return path.with_name(f".{path.name}.lock")


def session_lock_path(path: Path) -> Path:
    """The lock file every opening of the Edge store at `path` holds, from before the shard opens
    until its files are made owner-only after it closed: one process in the folder at a time."""
    return path.with_name(f".{path.name}.session.lock")


def has_store(path: Path) -> bool:
    """Whether there is anything to read at `path`: a store, or a migration to finish."""
    # A store moved aside (`.edge-old`) by a deletion killed before its rewrite got in place is one.
    beside = (edge_shard.READY, edge_shard.OLD)
    return path.exists() or any(edge_shard.sibling(path, suffix).exists() for suffix in beside)


def ensure_edge_store(path: Path) -> Migration | None:
    """Make `path` a complete Edge shard: as it is, created empty, or migrated from local mode (the
    `Migration` says what moved). `StoreBusy` while another process creates, migrates or uses
    local mode on it."""
    if edge_shard.is_shard(path):
        return None  # the common case: no lock, no further look
    with lock_file(setup_lock_path(path)):
        return _settle(path)


def settle_beside(path: Path) -> None:
    """Finish what a killed deletion left beside the complete store at `path` (the caller holds its
    folder): a half-built shard, a ready one, or the old store moved aside, which still holds the
    deleted profile. Costs three `stat`s when there is nothing."""
    if any(edge_shard.sibling(path, s).exists() for s in (edge_shard.NEW, edge_shard.READY, edge_shard.OLD)):
        with lock_file(setup_lock_path(path)):
            edge_shard.settle(path, complete=edge_shard.is_shard)


def _settle(path: Path) -> Migration | None:
    if edge_shard.is_shard(path):
        return None  # another process finished while this one waited
    if is_local_mode_folder(path):
        return _migrate(path)
    if path.exists() and any(path.iterdir()):
        raise UserError(
            f"{path} holds neither a Qdrant Edge store nor a Qdrant local-mode folder; move it away, "
            "or point MA_DATA_DIR elsewhere"
        )
    edge_shard.settle(path, complete=edge_shard.is_shard)  # killed between steps 4 and 5, or creating
    if not edge_shard.is_shard(path):
        edge_shard.install(edge_shard.build_beside(path, lambda new: build_shard(new, []), what=WHAT), path)
    return None


def _migrate(path: Path) -> Migration:
    client = open_local_client(path)  # its lock keeps local-mode writers out until the swap is done
    try:
        points = all_points(client)
        # An earlier attempt's: the folder may have changed since.
        shutil.rmtree(edge_shard.sibling(path, edge_shard.READY), ignore_errors=True)
        new = edge_shard.build_beside(path, lambda folder: build_shard(folder, points), what=WHAT)
        ready = _mark_ready(new, path)
        backup = _retire(path)
        _install(ready, path)
    finally:
        client.close()
    return Migration(store=path, moved=len(points), backup=backup)


def _retire(path: Path) -> Path:
    backup = edge_shard.sibling(path, ".local-mode-backup")
    number = 1
    while backup.exists():
        number += 1
        backup = edge_shard.sibling(path, f".local-mode-backup-{number}")
    os.rename(path, backup)
    os.chmod(backup, 0o700)  # it still holds every profile: owner-only, like the new store
    private_tree(backup)
    fsync_dir(path.parent)
    return backup
