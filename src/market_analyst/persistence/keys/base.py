"""Crypto-shredding for checkpoints: every value a saver stores is encrypted under a data key of its
thread, and erasing the key makes every copy unreadable (the database's heap and WAL, Redis's AOF,
a backup) without finding the copies.

- A **data key** is 32 random bytes for AES-GCM, one per thread, made when the thread is first
  written and recorded under the thread's owner, so `forget --user` erases every key of a person and
  `prune` the key of one thread. Its ID goes into each ciphertext's cipher name, which LangGraph's
  `EncryptedSerializer` stores beside the blob (`json+ma-aes-gcm.<key ID>`).
- The stored key is **wrapped** (AES-GCM) by the **master key**: `MA_MASTER_KEY` (32 bytes in
  base64), or `master.key` in the data directory (0600), made on first use. The wrapped key names the
  master key's fingerprint, so a key wrapped by another master key is one clear line, not garbage.
  Losing the master key loses every thread.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from market_analyst.errors import SealedValueUnreadable, UserError
from market_analyst.files import private_dir, write_new_private

CIPHER = "ma-aes-gcm"
KEY_BYTES = 32
NONCE_BYTES = 12
MASTER_FILE = "master.key"
MAKE_ONE = "make one with: python -c 'import os, base64; print(base64.b64encode(os.urandom(32)).decode())'"


@dataclass(frozen=True)
class WrappedKey:
    """A thread's data key as stored: wrapped by the master key whose fingerprint it names."""

    key_id: str
    thread_id: str
    owner: str  # the user who started the thread ("" when the thread index did not know)
    master: str  # the fingerprint of the master key that wrapped it
    wrapped: bytes
    created_at: str


class KeyStore(Protocol):
    """Where the wrapped data keys live (the data directory, or the records database)."""

    location: str

    def by_digest(self, digest: str) -> WrappedKey | None:
        """The key of the thread whose `thread_digest` this is, or None when it has none (never
        written, or erased)."""
        ...

    def add(self, key: WrappedKey, *, staged: bool = False) -> WrappedKey:
        """Record `key` as its thread's key unless the thread has one; return the thread's key (the
        one another process recorded first, if it did). With `staged`, the same for the thread's
        next key, which `promote` makes its key."""
        ...

    def promote(self, thread_id: str) -> bool:
        """Make the thread's staged key its key, erasing the one it replaces, in one step; False
        when none was staged."""
        ...

    def keys(self) -> list[WrappedKey]:
        """Every stored key."""
        ...

    def erase_thread(self, thread_id: str) -> int:
        """Erase the thread's keys (its key and a staged one); how many went."""
        ...

    def erase_owner(self, owner: str) -> int:
        """Erase every key recorded under `owner`; how many went."""
        ...


def thread_digest(thread_id: str) -> str:
    """A fixed-length name for a thread's key (thread IDs may hold ':' and '@')."""
    return hashlib.sha256(f"market-analyst:key:{thread_id}".encode()).hexdigest()[:32]


def new_key_id(thread_id: str) -> str:
    """The thread's digest and a random part: a key made again for the same thread has a new ID."""
    return f"{thread_digest(thread_id)}.{secrets.token_hex(8)}"


def digest_of(key_id: str) -> str:
    return key_id.split(".", 1)[0]


def staged_digest(digest: str) -> str:
    """Where a thread's next key is recorded until it is promoted (see `Keyring.stage`)."""
    return f"{digest}.next"


def _decode_master(text: str, where: str) -> bytes:
    try:
        raw = base64.b64decode(
            text.strip(), altchars=b"-_" if ("-" in text or "_" in text) else None, validate=True
        )
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise UserError(
            f"{where} is not a master key: it must be {KEY_BYTES} random bytes in base64; {MAKE_ONE}"
        )
    return raw


class MasterKey:
    """The key that wraps every data key, with its fingerprint."""

    def __init__(self, secret: bytes, source: str) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(secret)
        self.source = source
        self.fingerprint = hashlib.sha256(b"market-analyst:master:" + secret).hexdigest()[:16]

    def wrap(self, key_id: str, data_key: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, data_key, key_id.encode())

    def unwrap(self, key: WrappedKey, location: str) -> bytes:
        from cryptography.exceptions import InvalidTag

        if key.master != self.fingerprint:
            raise UserError(
                f"the data key of thread {key.thread_id} in {location} was wrapped by another master key "
                f"(fingerprint {key.master}; {self.source} has {self.fingerprint}): set the MA_MASTER_KEY "
                "that wrapped it, the same on every host"
            )
        try:
            return self._aead.decrypt(
                key.wrapped[:NONCE_BYTES], key.wrapped[NONCE_BYTES:], key.key_id.encode()
            )
        except InvalidTag:
            raise UserError(
                f"the data key of thread {key.thread_id} in {location} is damaged: it does not unwrap"
            ) from None


def load_master_key(configured: str | None, data_dir: Path, shared_by: str | None = None) -> MasterKey:
    """`MA_MASTER_KEY` when set, else the data directory's `master.key`, made (0600) if missing; two
    processes making it at once agree on the first one written. When the data keys are `shared_by`
    several hosts (a records database on a server), a key file of one host would lock the others out
    of its threads: then `MA_MASTER_KEY` is required."""
    if configured:
        return MasterKey(_decode_master(configured, "MA_MASTER_KEY"), "MA_MASTER_KEY")
    if shared_by is not None:
        raise UserError(
            f"the data keys live in {shared_by}, which every host shares, so the master key that wraps "
            f"them must be the same on each: set MA_MASTER_KEY; {MAKE_ONE}"
        )
    path = data_dir / MASTER_FILE
    if not path.exists():
        private_dir(data_dir, "MA_DATA_DIR")
        text = base64.b64encode(os.urandom(KEY_BYTES)).decode() + "\n"
        tmp = path.with_name(f".{MASTER_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        write_new_private(tmp, text.encode())
        try:
            os.link(tmp, path)  # fails if another process made it first: theirs is the key
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    try:
        mode = path.stat().st_mode & 0o077
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read the master key {path}: {exc.strerror or exc}") from None
    if mode:
        raise UserError(f"the master key {path} is readable by others: make it owner-only (chmod 600 {path})")
    return MasterKey(_decode_master(text, str(path)), str(path))


class KeyErased(SealedValueUnreadable):
    """A value sealed under a data key the key store does not hold: its thread was erased, or written
    by a process with another key store."""

    def __init__(self, key_id: str, location: str) -> None:
        super().__init__(
            f"it is sealed under data key {key_id}, which {location} does not hold: erased by forget or "
            "prune, or written with another records store (processes sharing a checkpointer need "
            "MA_RECORDS=postgres and the same MA_MASTER_KEY)"
        )
        self.key_id = key_id


class ThreadCipher:
    """`CipherProtocol` for one thread's data key: AES-GCM, the key ID in the cipher name."""

    def __init__(self, key_id: str, data_key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.key_id = key_id
        self.name = f"{CIPHER}.{key_id}"
        self._aead = AESGCM(data_key)

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(NONCE_BYTES)
        return self.name, nonce + self._aead.encrypt(nonce, plaintext, self.name.encode())

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:], ciphername.encode())
        except InvalidTag:
            raise UserError(f"a checkpoint value sealed under data key {self.key_id} is damaged") from None


class Keyring:
    """The data keys a process uses, from `store`, unwrapped by the master key on first use.

    It is the `CipherProtocol` that opens a sealed value: the cipher name says which key. Writing asks
    `cipher_for(thread)`, which makes the thread's key the first time, under the owner that `owner_of`
    finds for it (the thread index)."""

    def __init__(
        self,
        store: KeyStore,
        master: Callable[[], MasterKey],
        owner_of: Callable[[str], str | None] | None = None,
        now: Callable[[], str] | None = None,
    ) -> None:
        self.store = store
        self._master_factory = master
        self._master: MasterKey | None = None
        self.owner_of = owner_of
        self._now = now
        self._by_thread: dict[str, ThreadCipher] = {}
        self._by_id: dict[str, ThreadCipher] = {}
        self._lock = threading.Lock()

    def _master_key(self) -> MasterKey:
        if self._master is None:
            self._master = self._master_factory()
        return self._master

    def _cipher(self, key: WrappedKey) -> ThreadCipher:
        cipher = ThreadCipher(key.key_id, self._master_key().unwrap(key, self.store.location))
        with self._lock:
            self._by_thread[key.thread_id] = cipher
            self._by_id[key.key_id] = cipher
        return cipher

    def cipher_for(self, thread_id: str) -> ThreadCipher:
        """The cipher that seals the thread's values: its staged key while one waits to be promoted
        (so nothing is written under a key about to go), else its key, made on first use."""
        with self._lock:
            known = self._by_thread.get(thread_id)
        if known is not None:
            return known
        digest = thread_digest(thread_id)
        stored = self.store.by_digest(staged_digest(digest)) or self.store.by_digest(digest)
        if stored is None:
            stored = self.store.add(self._new_key(thread_id))
        return self._cipher(stored)

    def _new_key(self, thread_id: str) -> WrappedKey:
        master = self._master_key()
        key_id = new_key_id(thread_id)
        owner = (self.owner_of(thread_id) if self.owner_of is not None else None) or ""
        made = self._now() if self._now is not None else ""
        data_key = os.urandom(KEY_BYTES)
        return WrappedKey(key_id, thread_id, owner, master.fingerprint, master.wrap(key_id, data_key), made)

    def stage(self, thread_id: str) -> ThreadCipher:
        """A new key for the thread, recorded beside its key (or the one an interrupted re-keying
        staged): write every value under it, then `promote` it, and the old key, with every copy
        it sealed, is gone. Until then both open the thread's values."""
        stored = self.store.by_digest(staged_digest(thread_digest(thread_id)))
        if stored is None:
            stored = self.store.add(self._new_key(thread_id), staged=True)
        return self._cipher(stored)

    def staged(self, thread_id: str) -> bool:
        """Whether a re-keying of the thread staged a key it has not promoted (it was killed)."""
        return self.store.by_digest(staged_digest(thread_digest(thread_id))) is not None

    def promote(self, thread_id: str) -> bool:
        """Make the thread's staged key its key; the key it replaces is erased, here too (this process
        no longer opens what it sealed)."""
        promoted = self.store.promote(thread_id)
        current = self.store.by_digest(thread_digest(thread_id))
        digest = thread_digest(thread_id)
        with self._lock:
            self._by_thread.pop(thread_id, None)
            for key_id in [k for k in self._by_id if digest_of(k) == digest]:
                if current is None or key_id != current.key_id:
                    del self._by_id[key_id]
        return promoted

    def refresh(self, thread_id: str) -> None:
        """Read the thread's key from the store again on its next write: taken with the thread's
        lease, so a long-running process never writes under a key another one replaced."""
        with self._lock:
            self._by_thread.pop(thread_id, None)

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        raise TypeError("the keyring opens values; seal with cipher_for(thread_id)")

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        prefix, _, key_id = ciphername.partition(".")
        if prefix != CIPHER or not key_id:
            raise UserError(f"a checkpoint value names an unknown cipher {ciphername[:60]!r}")
        with self._lock:
            cipher = self._by_id.get(key_id)
        if cipher is None:
            cipher = self._load(key_id)
        return cipher.decrypt(ciphername, ciphertext)

    def _load(self, key_id: str) -> ThreadCipher:
        digest = digest_of(key_id)
        for stored in (self.store.by_digest(digest), self.store.by_digest(staged_digest(digest))):
            if stored is not None and stored.key_id == key_id:
                return self._opener(stored)
        raise KeyErased(key_id, self.store.location)  # erased (and perhaps made again since)

    def _opener(self, key: WrappedKey) -> ThreadCipher:
        cipher = ThreadCipher(key.key_id, self._master_key().unwrap(key, self.store.location))
        with self._lock:
            self._by_id[key.key_id] = cipher
        return cipher

    def forget_thread(self, thread_id: str) -> int:
        """Erase the thread's key here and in the store; how many went."""
        digest = thread_digest(thread_id)
        with self._lock:
            self._by_thread.pop(thread_id, None)
            for key_id in [k for k in self._by_id if digest_of(k) == digest]:
                del self._by_id[key_id]
        return self.store.erase_thread(thread_id)

    def forget_owner(self, owner: str) -> int:
        """Erase every key of `owner`'s threads; how many went."""
        with self._lock:
            self._by_thread.clear()
            self._by_id.clear()
        return self.store.erase_owner(owner)
