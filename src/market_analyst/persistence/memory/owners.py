"""Who has memories in an Edge shard: a marker file per owner in a folder beside it, so that a read
for an owner without any costs no shard open and loads no model.

A marker is made (and synced) before an owner's first memory is written, and removed only after their
last one went, by a rewrite that saw none of theirs left: a missing marker means no memory, a present
one means perhaps. A marker's name is a keyed hash of the owner (HMAC-SHA256 under a key derived from
the records secret), so the folder's listing names nobody, even to someone who guesses user IDs.

The folder's `KEYED` file holds the fingerprint of the key its markers were made with. Without it, or
with another one (markers an earlier release named by a plain SHA-256, or a records secret that
changed), no marker is trusted: every owner may have memories, until the store, opened, rebuilds the
markers from the shard's own owners (`rebuild`) and writes the fingerprint last.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from market_analyst.files import fsync_dir, private_dir, replace_whole

STAMP = "KEYED"


def marker_key(secret: str) -> bytes:
    """The markers' key, derived from the records secret (kept apart from its other uses)."""
    return hmac.new(secret.encode(), b"market-analyst owner markers v1", hashlib.sha256).digest()


class OwnerMarkers:
    """The markers in `folder` (made owner-only on first use; `what` names the store in errors), named
    under the key `key` returns (read once, when first needed)."""

    def __init__(self, folder: Path, *, what: str, key: Callable[[], bytes]) -> None:
        self.folder = folder
        self._what = what
        self._read_key = key
        self._key: bytes | None = None

    def _keyed(self) -> bytes:
        if self._key is None:
            self._key = self._read_key()
        return self._key

    def _marker(self, owner: str) -> str:
        return hmac.new(self._keyed(), owner.encode(), hashlib.sha256).hexdigest()[:32]

    def name_of(self, owner: str) -> str:
        """The name `owner` goes by in this folder (and in the store's manifest): a keyed hash."""
        return self._marker(owner)

    def any_marked(self) -> bool:
        """Whether any owner is marked: someone has (or had) memories here."""
        try:
            names = (entry.name for entry in self.folder.iterdir())
            return any(name != STAMP and not name.startswith(".") for name in names)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _fingerprint(self) -> str:
        return hmac.new(self._keyed(), b"fingerprint", hashlib.sha256).hexdigest()[:32]

    def current(self) -> bool:
        """Whether the markers were made with this key, so a missing one means no memory."""
        try:
            stamp = (self.folder / STAMP).read_text(encoding="ascii").strip()
        except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
            return False  # no key read: a store without markers yet never asks for the secret
        return hmac.compare_digest(stamp, self._fingerprint())

    def may_have(self, owner: str) -> bool:
        """False only if `owner` has no memory."""
        return not self.current() or (self.folder / self._marker(owner)).exists()

    def mark(self, owners: Iterable[str]) -> None:
        """Make each owner's marker, synced, before any of their memories is written."""
        folder = private_dir(self.folder, self._what)
        made = False
        for owner in owners:
            marker = folder / self._marker(owner)
            if not marker.exists():
                _touch(marker)
                made = True
        if made:
            fsync_dir(folder)

    def keep_only(self, owners: Iterable[str]) -> None:
        """Remove the markers of everyone not in `owners`: those a rewrite of the whole shard found
        (which, when the markers are not current, makes them current)."""
        if not self.current():
            self.rebuild(owners)
            return
        kept = {self._marker(owner) for owner in owners} | {STAMP}
        for marker in self.folder.glob("*"):
            if marker.name not in kept:
                marker.unlink(missing_ok=True)

    def rebuild(self, owners: Iterable[str]) -> None:
        """Make the markers of exactly `owners` (every owner the shard holds) under this key, then the
        fingerprint that makes them trusted; a kill part-way leaves them untrusted, to be rebuilt."""
        folder = private_dir(self.folder, self._what)
        (folder / STAMP).unlink(missing_ok=True)
        fsync_dir(folder)
        self.mark(owners)
        kept = {self._marker(owner) for owner in owners}
        for marker in folder.glob("*"):
            if marker.name not in kept:
                marker.unlink(missing_ok=True)
        replace_whole(folder / STAMP, (self._fingerprint() + "\n").encode("ascii"))


def _touch(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.fsync(fd)
    os.close(fd)
