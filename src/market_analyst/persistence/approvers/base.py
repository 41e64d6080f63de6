"""What both approver stores share: the token's form and how it is made, the argon2 hashing that is
the only comparison of secrets, the roles, and the checks made of an approver's entry. The twins are
`files.py` (`approvers.json` and `session-secret` in the data directory) and `postgres.py` (the
records database).

A token is `<id>.<secret>`: the ID finds the approver's entry without comparing secrets, and only an
argon2 hash of the whole token is stored, so neither store lets anyone sign in. The token is shown
once, when it is made.
"""

from __future__ import annotations

import functools
import re
import secrets
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from market_analyst.choices import ROLES
from market_analyst.errors import UserError
from market_analyst.ports import Approver
from market_analyst.state import validate_user_id

if TYPE_CHECKING:
    from argon2 import PasswordHasher


@functools.cache
def _hasher() -> PasswordHasher:
    # Imported here: every command imports this module through the factory, few of them hash.
    from argon2 import PasswordHasher

    # Tokens carry 256 random bits, so the hash need not slow down guessing; these are the OWASP
    # argon2id minimums (19 MiB, 2 passes), which verify in tens of milliseconds, not hundreds.
    return PasswordHasher(time_cost=2, memory_cost=19_456, parallelism=1)


@functools.cache
def _dummy_hash() -> str:
    """Verified when a token names no approver, so a wrong ID costs as much time as a wrong secret."""
    return _hasher().hash(secrets.token_urlsafe(32))


def verifies(entry: dict[str, Any] | None, token: str) -> bool:
    """Whether `token` is the one `entry` holds the hash of; with no entry, a dummy hash is verified
    instead, so a token naming no approver takes as long to refuse."""
    from argon2.exceptions import InvalidHashError, VerificationError

    try:
        good = bool(_hasher().verify(entry["token_hash"] if entry else _dummy_hash(), token))
    except (VerificationError, InvalidHashError):
        return False
    return good and entry is not None


# What `add` makes: 12 hex digits, a dot, 43 URL-safe characters. Anything else is refused before
# any comparison (a byte that is not ASCII would otherwise reach `compare_digest`, which refuses it).
TOKEN_FORM = re.compile(r"[0-9a-f]{12}\.[A-Za-z0-9_-]{43}")


def well_formed(token: str) -> bool:
    """Whether `token` has the form of a token `add` makes (nothing about whether it is valid)."""
    return TOKEN_FORM.fullmatch(token) is not None


def check_role(role: str) -> None:
    """`UserError` unless `role` is one of the roles."""
    if role not in ROLES:
        raise UserError(f"unknown role {role!r}: use {' or '.join(ROLES)}")


_EMAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def check_email(email: str) -> str:
    """`email` as kept (trimmed), or `UserError` unless it is one plain address."""
    email = email.strip()
    if not _EMAIL.fullmatch(email):
        raise UserError(f"{email!r} is not an email address such as dora@example.com")
    return email


def new_entry(name: str, created_at: str, role: str) -> tuple[str, dict[str, Any]]:
    """A new approver's token (its only appearance) and the entry a store keeps of it (the token's
    ID and argon2 hash, never the token)."""
    validate_user_id(name)
    check_role(role)
    token_id = secrets.token_hex(6)
    token = f"{token_id}.{secrets.token_urlsafe(32)}"
    entry = {
        "name": name,
        "token_id": token_id,
        "token_hash": _hasher().hash(token),
        "created_at": created_at,
        "role": role,
    }
    return token, entry


def exists(name: str) -> UserError:
    """The refusal of an `add` under a name an approver holds."""
    return UserError(
        f"approver {name!r} exists; to issue a new token, remove it first "
        f"(market-analyst approvers remove {name})"
    )


def approver_of(entry: dict[str, Any]) -> Approver:
    """An approver as listed, from its entry (entries made before roles existed are approvers)."""
    return Approver(
        entry["name"],
        entry["token_id"],
        entry["created_at"],
        entry.get("role", "approver"),
        entry.get("email"),
    )


class ApproverRules(ABC):
    """What both stores do the same way over their entries, however each keeps them."""

    @abstractmethod
    def _entry(self, name: str) -> dict[str, Any] | None:
        """Approver `name`'s entry as stored, or None."""

    @abstractmethod
    def _insert(self, entry: dict[str, Any]) -> bool:
        """Keep a new approver's entry unless an approver has its name: True when it was kept."""

    @abstractmethod
    def _change_role(self, name: str, role: str) -> bool:
        """Give approver `name` the (checked) `role`; False when there is no such approver."""

    @abstractmethod
    def _change_email(self, name: str, email: str | None) -> bool:
        """Give approver `name` the (checked) address, or none; False when there is no such approver."""

    @abstractmethod
    def stored(self) -> list[dict[str, Any]]:
        """Every approver's entry as stored (with its token hash, never a token), by name: what a copy
        carries over."""

    def add(self, name: str, created_at: str, role: str = "approver", email: str | None = None) -> str:
        """Make an approver with `role` (approver or reviewer), and `email` if given, and return its
        token, the only time it is ever available."""
        token, entry = new_entry(name, created_at, role)
        if email is not None:
            entry["email"] = check_email(email)
        if not self._insert(entry):
            raise exists(name)
        return token

    def set_role(self, name: str, role: str) -> bool:
        """Give approver `name` another role; False when there is no such approver."""
        check_role(role)
        return self._change_role(name, role)

    def set_email(self, name: str, email: str | None) -> bool:
        """Give approver `name` an address for notifications (None: none); False when there is no such
        approver."""
        return self._change_email(name, check_email(email) if email is not None else None)

    def list(self) -> list[Approver]:
        """Every approver, by name."""
        return [approver_of(entry) for entry in self.stored()]

    def role_of(self, name: str) -> str | None:
        """The role of approver `name`, or None when no approver has that name."""
        entry = self._entry(name)
        return None if entry is None else approver_of(entry).role

    def current(self, name: str, token_id: str) -> Approver | None:
        """The approver `name` if its token is still the one `token_id` names (a session's check)."""
        entry = self._entry(name)
        if entry is None or not secrets.compare_digest(
            entry["token_id"].encode(), token_id.encode("utf-8", "replace")
        ):
            return None
        return approver_of(entry)

    def _holder(self, name: str, token_id: str) -> Approver | None:
        """Approver `name` while it holds the token `token_id` (one this process verified before)."""
        entry = self._entry(name)
        return approver_of(entry) if entry and entry["token_id"] == token_id else None
