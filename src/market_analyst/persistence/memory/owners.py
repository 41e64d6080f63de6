"""Who has memories in an Edge shard: a marker file per owner in a folder beside it, so that a read
for an owner without any costs no shard open and loads no model.

A marker is made (and synced) before an owner's first memory is written, and removed only after their
last one went, by a rewrite that saw none of theirs left: a missing marker means no memory, a present
one means perhaps. A marker's name is a digest of the owner, so the folder's listing names nobody.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from market_analyst.files import fsync_dir, private_dir


class OwnerMarkers:
    """The markers in `folder` (made owner-only on first use; `what` names the store in errors)."""

    def __init__(self, folder: Path, *, what: str) -> None:
        self.folder = folder
        self._what = what

    def may_have(self, owner: str) -> bool:
        """False only if `owner` has no memory."""
        return (self.folder / _marker(owner)).exists()

    def mark(self, owners: Iterable[str]) -> None:
        """Make each owner's marker, synced, before any of their memories is written."""
        folder = private_dir(self.folder, self._what)
        made = False
        for owner in owners:
            marker = folder / _marker(owner)
            if not marker.exists():
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600)
                os.fsync(fd)
                os.close(fd)
                made = True
        if made:
            fsync_dir(folder)

    def keep_only(self, owners: Iterable[str]) -> None:
        """Remove the markers of everyone not in `owners`: those a rewrite of the whole shard found."""
        kept = {_marker(owner) for owner in owners}
        for marker in self.folder.glob("*"):
            if marker.name not in kept:
                marker.unlink(missing_ok=True)


def _marker(owner: str) -> str:
    return hashlib.sha256(owner.encode()).hexdigest()[:32]
