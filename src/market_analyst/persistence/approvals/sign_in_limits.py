"""Failed sign-ins of the web inbox, counted in one 0600 file in the data directory
(`sign-in-failures.json`) under a lock, so every server process on the host counts against the same
limit.

Checks of one key take turns (`turn`, a host-wide lock per key): the count is read, the token
verified and a failure recorded before the next check of that key starts, so forty requests at
once get at most the allowed number of verifications, not forty. Only failures are counted, each
for `window` seconds; a good token costs nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from market_analyst.files import private_dir, write_new_private

# At most this many keys are kept (the ones with the latest failures): an attacker spreading
# guesses over many addresses cannot make the file grow without bound.
MAX_KEYS = 10_000
# Keys share this many lock files (by hash): unrelated keys rarely wait for each other, and an
# attacker cannot make lock files without bound.
TURN_LOCKS = 64


class SignInLimits:
    """At most `limit` failures per key in any `window` seconds."""

    def __init__(self, root: Path, *, limit: int, window: float) -> None:
        self.root = root
        self.path = root / "sign-in-failures.json"
        self.limit = limit
        self.window = window

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, list[list[Any]]]]:
        """The counts, read and written back under the lock (one change at a time, host-wide)."""
        private_dir(self.root, "MA_DATA_DIR")
        fd = os.open(self.root / ".sign-in-failures.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                counts: dict[str, list[list[Any]]] = json.loads(self.path.read_bytes())
            except FileNotFoundError:
                counts = {}
            except (OSError, ValueError):
                counts = {}  # a damaged file forgets old failures; it never locks anyone out
            before = json.dumps(counts, sort_keys=True)
            yield counts
            if json.dumps(counts, sort_keys=True) != before:
                self._save(counts)
        finally:
            os.close(fd)

    def _save(self, counts: dict[str, list[list[Any]]]) -> None:
        if len(counts) > MAX_KEYS:
            newest = sorted(counts, key=lambda k: max(t for t, _ in counts[k]), reverse=True)[:MAX_KEYS]
            counts = {k: counts[k] for k in newest}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        write_new_private(tmp, json.dumps(counts, sort_keys=True).encode())
        os.replace(tmp, self.path)

    def _prune(self, counts: dict[str, list[list[Any]]], now: float) -> None:
        for key in list(counts):
            recent = [entry for entry in counts[key] if entry[0] > now - self.window]
            if recent:
                counts[key] = recent
            else:
                del counts[key]

    @contextlib.contextmanager
    def turn(self, key: str) -> Iterator[None]:
        """Hold `key`'s turn: no other check of the same key, in any process, runs meanwhile."""
        private_dir(self.root, "MA_DATA_DIR")
        slot = int.from_bytes(hashlib.sha256(key.encode("utf-8", "replace")).digest()[:4], "big") % TURN_LOCKS
        fd = os.open(self.root / f".sign-in-turn.{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def retry_after(self, key: str, now: float) -> float | None:
        """None while `key` has failures left; else the seconds until its oldest failure expires."""
        with self._locked() as counts:
            self._prune(counts, now)
            entries = counts.get(key, [])
            if len(entries) < self.limit:
                return None
            return max(min(t for t, _ in entries) + self.window - now, 0.0)

    def failed(self, key: str, now: float) -> None:
        """Count one failure of `key`."""
        with self._locked() as counts:
            self._prune(counts, now)
            counts[key] = [*counts.get(key, []), [now, secrets.token_hex(4)]]

    def failures(self, key: str, now: float) -> int:
        """How many failures `key` has in the window now."""
        with self._locked() as counts:
            self._prune(counts, now)
            return len(counts.get(key, []))
