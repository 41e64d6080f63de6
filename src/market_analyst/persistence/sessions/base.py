"""What both session stores share: how a session is made and keyed, when it
has ended, and which keys can name one. The twins are `files.py` (files in the data directory, one host)
and `postgres.py` (the records database, every host), each with its sign-in limits beside it."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from market_analyst.ports import SessionRecord

_KEY_LENGTH = 64  # hex digits of a SHA-256 digest


def session_key(session_id: str) -> str:
    """The stored key of a session ID: what the store holds instead of the ID itself."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()


def names_a_session(key: str) -> bool:
    """Whether `key` has the form of a stored key (anything else names no session to revoke)."""
    return len(key) == _KEY_LENGTH and all(c in "0123456789abcdef" for c in key)


def new_session(*, name: str, token_id: str, client: str, now: float) -> tuple[str, SessionRecord]:
    """A new session for approver `name`: its ID (for the cookie, never stored) and its record."""
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
    return session_id, record


class SessionRules:
    """Sessions ended after `idle` seconds unused or `lifetime` seconds after sign-in, whichever
    comes first."""

    def __init__(self, *, idle: float, lifetime: float) -> None:
        self.idle = idle
        self.lifetime = lifetime

    def _expired(self, record: SessionRecord, now: float) -> bool:
        return now - record.last_seen >= self.idle or now - record.created_at >= self.lifetime

    def _live(self, records: Iterable[SessionRecord], now: float) -> list[SessionRecord]:
        """The records of `records` still live at `now`, oldest first."""
        live = [r for r in records if not self._expired(r, now)]
        return sorted(live, key=lambda r: (r.created_at, r.key))
