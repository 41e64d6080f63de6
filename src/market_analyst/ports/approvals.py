"""What the doors and the workflow ask of the approval stores, whichever backend holds them (the
files in the data directory with `MA_RECORDS=files`, the PostgreSQL records database with
`MA_RECORDS=postgres`): the approvers and the session secret, the web inbox's signed-in sessions, and
the failed sign-ins counted against a limit. Both twins of each store implement one of these."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Approver:
    """An approver as listed: never the token or its hash."""

    name: str
    token_id: str
    created_at: str
    role: str = "approver"
    email: str | None = None  # where notifications reach them (`approvers set-email`)


class Approvers(Protocol):
    """The approvers, their token hashes and roles, and the secret that signs session cookies."""

    def add(self, name: str, created_at: str, role: str = "approver", email: str | None = None) -> str: ...
    def set_email(self, name: str, email: str | None) -> bool: ...
    def remove(self, name: str) -> bool: ...
    def set_role(self, name: str, role: str) -> bool: ...
    def role_of(self, name: str) -> str | None: ...
    def list(self) -> list[Approver]: ...
    def recognised(self, token: str) -> Approver | None: ...
    def knows_token_id(self, token_id: str) -> bool: ...
    def authenticate(self, token: str) -> Approver | None: ...
    def current(self, name: str, token_id: str) -> Approver | None: ...
    def session_secret(self) -> str: ...


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


class Sessions(Protocol):
    """Signed-in sessions of the web inbox, shared by every server process."""

    idle: float
    lifetime: float

    def create(self, *, name: str, token_id: str, client: str, now: float) -> tuple[str, SessionRecord]: ...
    def find(self, session_id: str, now: float) -> SessionRecord | None: ...
    def touch(self, key: str, now: float) -> SessionRecord | None: ...
    def sessions(self, name: str, now: float) -> list[SessionRecord]: ...
    def revoke(self, key: str) -> bool: ...
    def revoke_all(self, name: str) -> int: ...


class SignInFailures(Protocol):
    """Failed sign-ins counted per key in a window, and turns that keep checks of one key apart."""

    limit: int
    window: float

    def turn(self, key: str) -> AbstractContextManager[None]: ...
    def retry_after(self, key: str, now: float) -> float | None: ...
    def failed(self, key: str, now: float) -> None: ...
    def failures(self, key: str, now: float) -> int: ...
