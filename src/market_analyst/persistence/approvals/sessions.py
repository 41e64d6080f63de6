"""Signed-in sessions of the web inbox: one record per session, one 0600 file each in
`MA_DATA_DIR/sessions/`, so every server process on the host sees a sign-out, an expiry or a
revocation on its next request.

The cookie carries a random session ID (256 bits); the store keeps only its SHA-256 digest (the
record's key and file name), so the directory does not let anyone sign in. A record names the
approver, the token it signed in with, its CSRF token, when it was made, when it was last used and
from which address. Changes take one lock (`.lock`) so that a revocation can never be undone by a
"last seen" update racing it; reads take none (every file is replaced whole, atomically).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from market_analyst.errors import UserError
from market_analyst.files import private_dir, write_new_private

_KEY_LENGTH = 64  # hex digits of a SHA-256 digest


def session_key(session_id: str) -> str:
    """The stored key of a session ID: what the directory holds instead of the ID itself."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class SessionRecord:
    """One signed-in session, as stored (never the session ID itself)."""

    key: str
    name: str
    token_id: str
    csrf: str
    created_at: float
    last_seen: float
    client: str

    @property
    def label(self) -> str:
        """A short name for the session, safe to show: the start of its key."""
        return self.key[:12]


class SessionStore:
    """Session records in `root/sessions/`, ended after `idle` seconds unused or `lifetime` seconds
    after sign-in, whichever comes first."""

    def __init__(self, root: Path, *, idle: float, lifetime: float) -> None:
        self.root = root
        self.dir = root / "sessions"
        self.idle = idle
        self.lifetime = lifetime

    # -- files ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.dir, "the sessions directory")
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

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

    def _expired(self, record: SessionRecord, now: float) -> bool:
        return now - record.last_seen >= self.idle or now - record.created_at >= self.lifetime

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
        session_id = secrets.token_urlsafe(32)
        record = SessionRecord(
            key=session_key(session_id),
            name=name,
            token_id=token_id,
            csrf=secrets.token_urlsafe(32),
            created_at=now,
            last_seen=now,
            client=client[:64],
        )
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
        found = [r for r in self._records() if r.name == name and not self._expired(r, now)]
        return sorted(found, key=lambda r: (r.created_at, r.key))

    def revoke(self, key: str) -> bool:
        """End one session at once; False when there was none under `key`."""
        if len(key) != _KEY_LENGTH or not all(c in "0123456789abcdef" for c in key):
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
