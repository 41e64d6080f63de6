"""What both checkpoint backends do with a whole thread's stored values: seal what an earlier release
left in clear (`records encrypt`), and re-key a thread (`forget --including-said-by`, `memories
forget`). Each backend supplies `_rewrite`, which writes all of a thread's values at once."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from market_analyst.errors import UserError
from market_analyst.persistence.keys.base import Keyring, ThreadCipher


def _same(channel: str, value: Any) -> Any:
    return value


@dataclass
class Rewrite:
    """One rewrite of a thread's values: under the cipher `cipher_of` gives (asked once, and only if
    there is something to write), which values (with `everything` the sealed ones too, else those in
    clear), through `change(channel, value)` (which returns a value it leaves alone as that very
    object); and what it did."""

    cipher_of: Callable[[], ThreadCipher]
    everything: bool
    change: Callable[[str, Any], Any] = _same
    written: int = 0
    changed: int = 0
    _cipher: ThreadCipher | None = field(default=None, repr=False)

    def cipher(self) -> ThreadCipher:
        if self._cipher is None:
            self._cipher = self.cipher_of()
        return self._cipher

    def apply(self, channel: str, value: Any) -> Any:
        """`value` (of `channel`) as it is to be written again, counted."""
        new = self.change(channel, value)
        self.written += 1
        self.changed += new is not value
        return new


class ThreadRewriter(ABC):
    """What both backends do with a whole thread's stored values, over their own `_rewrite` (one
    transaction on PostgreSQL, one MULTI/EXEC on Redis): seal what an earlier release left in clear,
    and re-key a thread (`rekey_thread`). Call each holding the thread's lease."""

    keyring: Keyring | None

    @abstractmethod
    def _rewrite(self, thread_id: str, plan: Rewrite) -> None:
        """Write the thread's values again as `plan` says, all of them at once."""

    def seal_thread(self, thread_id: str) -> int:
        """Re-write what the thread holds in clear (written before sealing) under its data key, at
        once: a kill leaves it all old or all new, and a second run finds nothing to do. Returns how
        many values were sealed."""
        if self.keyring is None:
            return 0
        keyring = self.keyring
        plan = Rewrite(lambda: keyring.cipher_for(thread_id), everything=False)
        self._rewrite(thread_id, plan)
        return plan.written

    def rekey_thread(self, thread_id: str, change: Callable[[str, Any], Any]) -> int:
        """Re-write every value of the thread through `change(channel, value)` under a new data key,
        at once, then erase the old key: every copy the old key sealed (dead tuples, WAL, AOF, a
        backup, a replica) is unreadable from then on. A kill before the key is promoted leaves the
        staged key to the next run (see `Keyring.stage`). Returns how many values `change` changed."""
        if self.keyring is None:
            raise UserError("re-keying a thread needs sealed checkpoints")
        cipher = self.keyring.stage(thread_id)
        plan = Rewrite(lambda: cipher, everything=True, change=change)
        self._rewrite(thread_id, plan)
        self.keyring.promote(thread_id)
        return plan.changed

    def rekey_interrupted(self, thread_id: str) -> bool:
        """Whether a re-keying of the thread was killed before its new key was promoted."""
        return self.keyring is not None and self.keyring.staged(thread_id)
