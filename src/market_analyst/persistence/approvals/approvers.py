"""Approvers of the web inbox: a name and the argon2 hash of a token, in one 0600 file in the data
directory, plus the secret that signs session cookies (another 0600 file there).

A token is `<id>.<secret>`: the ID finds the approver's entry without comparing secrets, and only an
argon2 hash of the whole token is stored, so the file does not let anyone sign in. The token is shown
once, when it is made. A server verifies each token with argon2 once and then remembers the digest
of the good token in memory while the file stays unchanged, so removing an approver (or re-issuing
a token) takes effect on its next request.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from market_analyst.decisions import ROLES
from market_analyst.errors import UserError
from market_analyst.files import private_dir, write_new_private
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


def _verifies(token_hash: str, token: str) -> bool:
    from argon2.exceptions import InvalidHashError, VerificationError

    try:
        return bool(_hasher().verify(token_hash, token))
    except (VerificationError, InvalidHashError):
        return False


# What `add` makes: 12 hex digits, a dot, 43 URL-safe characters. Anything else is refused before
# any comparison (a byte that is not ASCII would otherwise reach `compare_digest`, which refuses it).
TOKEN_FORM = re.compile(r"[0-9a-f]{12}\.[A-Za-z0-9_-]{43}")


def well_formed(token: str) -> bool:
    """Whether `token` has the form of a token `add` makes (nothing about whether it is valid)."""
    return TOKEN_FORM.fullmatch(token) is not None


@dataclass(frozen=True)
class Approver:
    """An approver as listed: never the token or its hash."""

    name: str
    token_id: str
    created_at: str
    role: str = "approver"


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise UserError(f"unknown role {role!r}: use {' or '.join(ROLES)}")


def _temp_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _write_private(path: Path, data: bytes) -> None:
    """Replace `path` atomically with `data`, readable and writable by the owner only. A write that
    fails (a full disk, a read-only file system) leaves the old file as it was, and no temporary
    file behind."""
    tmp = _temp_beside(path)
    try:
        write_new_private(tmp, data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UserError(f"cannot write {path}: {exc.strerror or exc}; nothing was changed") from None


class ApproverStore:
    """The approvers file (`approvers.json`) and the session secret (`session-secret`) in `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "approvers.json"
        self._verified: dict[bytes, tuple[str, str]] = {}  # token digest -> (name, token ID)
        self._verified_for: tuple[int, int, int] | None = None  # the file those were verified against
        self._lock = threading.Lock()

    # -- the file ---------------------------------------------------------------------------------

    def _ensure_root(self) -> None:
        private_dir(self.root, "MA_DATA_DIR")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise changes between processes (two `approvers add` at once keep both)."""
        self._ensure_root()
        try:
            fd = os.open(self.root / ".approvers.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:  # no room for the lock file, or a folder this user cannot write
            raise UserError(f"cannot create {self.root / '.approvers.lock'}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _entries(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read the approvers file {self.path}: {exc}") from None
        return {entry["name"]: entry for entry in data.get("approvers", [])}

    def _save(self, entries: dict[str, dict[str, Any]]) -> None:
        document = {"approvers": [entries[name] for name in sorted(entries)]}
        _write_private(self.path, (json.dumps(document, indent=2) + "\n").encode())

    # -- managing approvers -----------------------------------------------------------------------

    def add(self, name: str, created_at: str, role: str = "approver") -> str:
        """Make an approver with `role` (approver or reviewer) and return its token, the only time it
        is ever available."""
        validate_user_id(name)
        _check_role(role)
        token_id = secrets.token_hex(6)
        token = f"{token_id}.{secrets.token_urlsafe(32)}"
        with self._locked():
            entries = self._entries()
            if name in entries:
                raise UserError(
                    f"approver {name!r} exists; to issue a new token, remove it first "
                    f"(market-analyst approvers remove {name})"
                )
            entries[name] = {
                "name": name,
                "token_id": token_id,
                "token_hash": _hasher().hash(token),
                "created_at": created_at,
                "role": role,
            }
            self._save(entries)
        return token

    def remove(self, name: str) -> bool:
        """Remove an approver; its token and sessions stop working. False when there was none."""
        with self._locked():
            entries = self._entries()
            if entries.pop(name, None) is None:
                return False
            self._save(entries)
        return True

    def set_role(self, name: str, role: str) -> bool:
        """Give approver `name` another role; False when there is no such approver."""
        _check_role(role)
        with self._locked():
            entries = self._entries()
            if name not in entries:
                return False
            entries[name]["role"] = role
            self._save(entries)
        return True

    def role_of(self, name: str) -> str | None:
        """The role of approver `name` (entries made before roles existed are approvers), or None
        when no approver has that name."""
        entry = self._entries().get(name)
        return None if entry is None else str(entry.get("role", "approver"))

    def stored(self) -> list[dict[str, Any]]:
        """Every approver's entry as stored (with its token hash, never a token), by name: what a copy
        carries over."""
        return [dict(entry) for _, entry in sorted(self._entries().items())]

    def list(self) -> list[Approver]:
        """Every approver, by name."""
        return [self._approver(e) for e in sorted(self._entries().values(), key=lambda e: e["name"])]

    # -- signing in -------------------------------------------------------------------------------

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def recognised(self, token: str) -> Approver | None:
        """The approver of a token this process has verified before, while the file is unchanged;
        None otherwise. Costs no argon2 verification, so a limit on failures never holds it up."""
        if not well_formed(token):
            return None
        digest = hashlib.sha256(token.encode()).digest()
        signature = self._signature()
        with self._lock:
            known = self._verified.get(digest) if signature == self._verified_for else None
        if known is None:
            return None
        entry = self._entries().get(known[0])
        return self._approver(entry) if entry and entry["token_id"] == known[1] else None

    def knows_token_id(self, token_id: str) -> bool:
        """Whether some approver's token has this ID (the ID is not the secret)."""
        return any(
            secrets.compare_digest(e["token_id"].encode(), token_id.encode("utf-8", "replace"))
            for e in self._entries().values()
        )

    def authenticate(self, token: str) -> Approver | None:
        """The approver whose token this is, or None. Secrets are compared only by argon2's
        constant-time verification; a token seen before is found by its digest. A token not of the
        form `add` makes is refused without any verification."""
        if not well_formed(token):
            return None
        digest = hashlib.sha256(token.encode()).digest()
        signature = self._signature()
        with self._lock:
            if signature != self._verified_for:
                self._verified, self._verified_for = {}, signature
            known = self._verified.get(digest)
        entries = self._entries()
        if known is not None:
            entry = entries.get(known[0])
            return self._approver(entry) if entry and entry["token_id"] == known[1] else None
        token_id = token.split(".", 1)[0]
        entry = next((e for e in entries.values() if secrets.compare_digest(e["token_id"], token_id)), None)
        if not _verifies(entry["token_hash"] if entry else _dummy_hash(), token) or entry is None:
            return None
        with self._lock:
            if signature == self._verified_for:
                self._verified[digest] = (entry["name"], entry["token_id"])
        return self._approver(entry)

    def current(self, name: str, token_id: str) -> Approver | None:
        """The approver `name` if its token is still the one `token_id` names (a session's check)."""
        entry = self._entries().get(name)
        if entry is None or not secrets.compare_digest(
            entry["token_id"].encode(), token_id.encode("utf-8", "replace")
        ):
            return None
        return self._approver(entry)

    @staticmethod
    def _approver(entry: dict[str, Any]) -> Approver:
        return Approver(entry["name"], entry["token_id"], entry["created_at"], entry.get("role", "approver"))

    # -- the session secret -----------------------------------------------------------------------

    def stored_session_secret(self) -> str | None:
        """The session secret if one was made (None otherwise); makes none."""
        try:
            return (self.root / "session-secret").read_text().strip() or None
        except FileNotFoundError:
            return None

    def session_secret(self) -> str:
        """The key that signs session cookies: made once (0600) and kept; delete the file to sign
        every session out."""
        path = self.root / "session-secret"
        with contextlib.suppress(FileNotFoundError):
            return path.read_text().strip()
        self._ensure_root()
        tmp = _temp_beside(path)
        try:
            write_new_private(tmp, (secrets.token_hex(32) + "\n").encode())
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
        try:
            os.link(tmp, path)  # fails if another process made it first: then theirs is the secret
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        return path.read_text().strip()
