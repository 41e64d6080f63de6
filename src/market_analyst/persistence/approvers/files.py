"""Approvers of the web inbox: a name and the argon2 hash of a token, in one 0600 file in the data
directory, plus the secret that signs session cookies (another 0600 file there).

The token's form and hashing are `base.py`'s, shared with the records database's twin. A server
verifies each token with argon2 once and then remembers the digest of the good token in memory
while the file stays unchanged, so removing an approver (or re-issuing a token) takes effect on its
next request.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.files import exclusive_lock, private_dir, write_new_private
from market_analyst.persistence.approvers.base import ApproverRules, approver_of, verifies, well_formed
from market_analyst.ports import Approver


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


class ApproverStore(ApproverRules):
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
        path = self.root / ".approvers.lock"
        # No room for the lock file, or a folder this user cannot write: one line.
        with exclusive_lock(path, lambda exc: UserError(f"cannot create {path}: {exc.strerror or exc}")):
            yield

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

    def _insert(self, entry: dict[str, Any]) -> bool:
        with self._locked():
            entries = self._entries()
            if entry["name"] in entries:
                return False
            entries[entry["name"]] = entry
            self._save(entries)
        return True

    def remove(self, name: str) -> bool:
        """Remove an approver; its token and sessions stop working. False when there was none."""
        with self._locked():
            entries = self._entries()
            if entries.pop(name, None) is None:
                return False
            self._save(entries)
        return True

    def _change_role(self, name: str, role: str) -> bool:
        with self._locked():
            entries = self._entries()
            if name not in entries:
                return False
            entries[name]["role"] = role
            self._save(entries)
        return True

    def _change_email(self, name: str, email: str | None) -> bool:
        with self._locked():
            entries = self._entries()
            if name not in entries:
                return False
            if email is None:
                entries[name].pop("email", None)
            else:
                entries[name]["email"] = email
            self._save(entries)
        return True

    def _entry(self, name: str) -> dict[str, Any] | None:
        return self._entries().get(name)

    def stored(self) -> list[dict[str, Any]]:
        """Every approver's entry as stored (with its token hash, never a token), by name: what a copy
        carries over."""
        return [dict(entry) for _, entry in sorted(self._entries().items())]

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
        return None if known is None else self._holder(*known)

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
        if known is not None:
            return self._holder(*known)
        token_id = token.split(".", 1)[0]
        entries = self._entries()
        entry = next((e for e in entries.values() if secrets.compare_digest(e["token_id"], token_id)), None)
        if not verifies(entry, token) or entry is None:
            return None
        with self._lock:
            if signature == self._verified_for:
                self._verified[digest] = (entry["name"], entry["token_id"])
        return approver_of(entry)

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
