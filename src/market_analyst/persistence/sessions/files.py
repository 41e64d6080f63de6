"""Signed-in sessions and failed sign-ins of the web inbox, in the data directory
(`MA_RECORDS=files`): every server process on the host sees the same ones.

Sessions: one record per session, one 0600 file each in `MA_DATA_DIR/sessions/`, so every server
process sees a sign-out, an expiry or a revocation on its next request. The cookie carries a random
session ID (256 bits); the store keeps only its SHA-256 digest (the record's key and file name), so
the directory does not let anyone sign in. A record names the approver, the token it signed in with,
its CSRF token, when it was made, when it was last used and from which address. Changes take one
lock (`.lock`) so that a revocation can never be undone by a "last seen" update racing it; reads take
none (every file is replaced whole, atomically).

Failed sign-ins: counted in one 0600 file in the data directory (`sign-in-failures.json`) under a
lock, so every server process counts against the same limit. Checks of one key take turns (`turn`,
a host-wide lock per key): the count is read, the token verified and a failure recorded before the
next check of that key starts, so forty requests at once get at most the allowed number of
verifications, not forty. Only failures are counted, each for `window` seconds; a good token costs
nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.files import exclusive_lock, private_dir, write_new_private
from market_analyst.persistence.sessions.base import SessionRules, names_a_session, new_session, session_key
from market_analyst.ports import SessionRecord

# At most this many keys are kept (the ones with the latest failures): an attacker spreading
# guesses over many addresses cannot make the file grow without bound.
MAX_KEYS = 10_000
# Keys share this many lock files (by hash): unrelated keys rarely wait for each other, and an
# attacker cannot make lock files without bound.
TURN_LOCKS = 64


class SessionStore(SessionRules):
    """Session records in `root/sessions/`, ended after `idle` seconds unused or `lifetime` seconds
    after sign-in, whichever comes first."""

    def __init__(self, root: Path, *, idle: float, lifetime: float) -> None:
        super().__init__(idle=idle, lifetime=lifetime)
        self.root = root
        self.dir = root / "sessions"

    # -- files ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.dir, "the sessions directory")
        with exclusive_lock(self.dir / ".lock"):
            yield

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def _load(self, path: Path) -> SessionRecord | None:
        try:
            data = json.loads(path.read_bytes())
            return SessionRecord(**data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):
            return None  # a damaged record signs no one in

    def _save(self, record: SessionRecord) -> None:
        path = self._path(record.key)
        tmp = path.with_name(f".{record.key}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        write_new_private(tmp, json.dumps(asdict(record)).encode())
        os.replace(tmp, path)

    def _records(self) -> Iterator[SessionRecord]:
        try:
            paths = sorted(self.dir.glob("*.json"))
        except OSError as exc:
            raise UserError(f"cannot read the sessions directory {self.dir}: {exc}") from None
        for path in paths:
            record = self._load(path)
            if record is not None and record.key == path.stem:
                yield record

    # -- sessions ---------------------------------------------------------------------------------

    def create(self, *, name: str, token_id: str, client: str, now: float) -> tuple[str, SessionRecord]:
        """A new session for approver `name`: its ID (for the cookie, never stored) and its record.
        Expired records are cleared away at the same time, so the directory stays small."""
        session_id, record = new_session(name=name, token_id=token_id, client=client, now=now)
        with self._locked():
            for old in self._records():
                if self._expired(old, now):
                    self._path(old.key).unlink(missing_ok=True)
            self._save(record)
        return session_id, record

    def find(self, session_id: str, now: float) -> SessionRecord | None:
        """The live session with this ID, or None (unknown, revoked or timed out)."""
        key = session_key(session_id)
        record = self._load(self._path(key))
        if record is None or record.key != key or self._expired(record, now):
            return None
        return record

    def touch(self, key: str, now: float) -> SessionRecord | None:
        """Record a use of a live session; None when it ended meanwhile (it stays ended)."""
        with self._locked():
            record = self._load(self._path(key))
            if record is None or self._expired(record, now):
                return None
            record = SessionRecord(**(asdict(record) | {"last_seen": now}))
            self._save(record)
        return record

    def sessions(self, name: str, now: float) -> list[SessionRecord]:
        """The live sessions of approver `name`, oldest first."""
        return self._live((r for r in self._records() if r.name == name), now)

    def revoke(self, key: str) -> bool:
        """End one session at once; False when there was none under `key`."""
        if not names_a_session(key):
            return False
        with self._locked():
            path = self._path(key)
            existed = path.exists()
            path.unlink(missing_ok=True)
        return existed

    def revoke_all(self, name: str) -> int:
        """End every session of approver `name` (sign-out everywhere); how many there were."""
        with self._locked():
            ended = [r for r in self._records() if r.name == name]
            for record in ended:
                self._path(record.key).unlink(missing_ok=True)
        return len(ended)


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
        with exclusive_lock(self.root / ".sign-in-failures.lock"):
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
        with exclusive_lock(self.root / f".sign-in-turn.{slot}.lock"):
            yield

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
