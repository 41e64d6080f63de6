"""The data keys in the data directory (`MA_RECORDS=files`): `keys/<thread digest>.json`, one file a
thread, created with a link that fails when another process made the thread's key first. Erasing a
key unlinks its file; what the file held was wrapped by the master key, which never lies beside it
in the database or a Redis AOF."""

from __future__ import annotations

import base64
import json
import os
import secrets
from dataclasses import asdict
from pathlib import Path
from typing import Any

from market_analyst.errors import UserError
from market_analyst.files import fsync_dir, private_dir, write_new_private
from market_analyst.persistence.keys.base import WrappedKey, staged_digest, thread_digest


class FileKeyStore:
    """`KeyStore` as one owner-only file per thread under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)

    def _path(self, digest: str) -> Path:
        return self.root / f"{digest}.json"

    def _read(self, path: Path) -> WrappedKey | None:
        try:
            raw: dict[str, Any] = json.loads(path.read_bytes())
            raw["wrapped"] = base64.b64decode(raw["wrapped"])
            return WrappedKey(**raw)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise UserError(f"the data key file {path} is unreadable ({type(exc).__name__})") from None

    def by_digest(self, digest: str) -> WrappedKey | None:
        return self._read(self._path(digest))

    def add(self, key: WrappedKey, *, staged: bool = False) -> WrappedKey:
        private_dir(self.root, "the data key store")
        digest = thread_digest(key.thread_id)
        path = self._path(staged_digest(digest) if staged else digest)
        record = asdict(key) | {"wrapped": base64.b64encode(key.wrapped).decode()}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        write_new_private(tmp, json.dumps(record, sort_keys=True).encode())
        try:
            os.link(tmp, path)  # whole or absent; fails when another process made the key first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(self.root)
        found = self._read(path)
        if found is None and staged:  # promoted meanwhile by another process: that key is the one
            found = self._read(self._path(digest))
        if found is None:  # erased between the link and the read: that erasure wins
            raise UserError(f"thread {key.thread_id} was erased while it was being written")
        return found

    def keys(self) -> list[WrappedKey]:
        if not self.root.is_dir():
            return []
        found = [self._read(path) for path in sorted(self.root.glob("*.json"))]
        return [key for key in found if key is not None]

    def stored(self) -> list[tuple[str, WrappedKey]]:
        """Every stored key with the name it is stored under (a thread's digest, or its staged
        digest): what a copy carries over. Reads only."""
        if not self.root.is_dir():
            return []
        found = [(path.stem, self._read(path)) for path in sorted(self.root.glob("[!.]*.json"))]
        return [(digest, key) for digest, key in found if key is not None]

    def _unlink(self, paths: list[Path]) -> int:
        gone = 0
        for path in paths:
            try:
                path.unlink()
                gone += 1
            except FileNotFoundError:
                pass
        if paths:
            fsync_dir(self.root)
        return gone

    def promote(self, thread_id: str) -> bool:
        digest = thread_digest(thread_id)
        try:
            os.replace(self._path(staged_digest(digest)), self._path(digest))  # one step: old or new
        except FileNotFoundError:
            return False
        fsync_dir(self.root)
        return True

    def _both(self, thread_id: str) -> list[Path]:
        digest = thread_digest(thread_id)
        return [self._path(digest), self._path(staged_digest(digest))]

    def erase_thread(self, thread_id: str) -> int:
        return self._unlink([path for path in self._both(thread_id) if path.exists()])

    def erase_owner(self, owner: str) -> int:
        owned = {k.thread_id for k in self.keys() if k.owner == owner}
        return self._unlink([path for thread_id in sorted(owned) for path in self._both(thread_id)])
