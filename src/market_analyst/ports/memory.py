"""The memory port: what people said in earlier threads, recalled by meaning and words, and the
embedder that turns texts into the vectors recall compares."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Protocol

from market_analyst.choices import RecallMode
from market_analyst.state import Memory


class MemoryStore(Protocol):
    """What people said in earlier threads, per owner: written by the workflow from recorded sources,
    recalled by meaning and words. Every read is filtered by owner; superseded memories are never
    recalled. Nothing is embedded (no model loaded) for an owner who has no memories."""

    def at_once(self) -> MemoryStore:
        """The same store for calls that must not wait for it: one held by another process refuses
        at once (`UserError`) instead of after a few seconds."""
        ...

    def write(self, memories: Sequence[Memory]) -> None:
        """Insert or replace each memory by its ID: writing the same ID twice leaves one memory."""
        ...

    def recall(
        self,
        owner: str,
        query: str,
        *,
        ticker: str | None = None,
        limit: int = 5,
        budget_chars: int = 1500,
        mode: RecallMode = "hybrid_recency",
        now: datetime | None = None,
        floor: bool = True,
    ) -> list[Memory]:
        """At most `limit` of `owner`'s live memories most relevant to `query` (and `ticker`), best
        first, whose texts together fit in `budget_chars`; [] at once when the owner has none. With
        `floor`, none that scores under the relevance floor (`hybrid_recency` only): a run without a
        question asks without it, for what was said about the ticker at all."""
        ...

    def trail(self, owner: str, ticker: str, *, limit: int = 3) -> tuple[list[Memory], int]:
        """`owner`'s decision trail on `ticker`: the live memories `owner`'s own threads on it left
        (feedback, rejection reasons, approval notes, published reports), newest first, at most
        `limit`, and how many more there are; whatever the question, in one filtered lookup that
        loads no model."""
        ...

    def verify(self) -> None:
        """Check the whole store, every memory read, as a write or an erasure does first; `UserError`
        (in one line, naming `memories check`) when it fails."""
        ...

    def has_memories(self, owner: str) -> bool:
        """Whether `owner` has any memory (superseded ones count); cheap, loads no model."""
        ...

    def list(self, owner: str, *, include_superseded: bool = False) -> list[Memory]:
        """`owner`'s memories, newest first; superseded ones only with `include_superseded`."""
        ...

    def get(self, owner: str, memory_id: str) -> Memory | None:
        """The memory `memory_id` if `owner` owns it, else None (another owner's is absent too)."""
        ...

    def kept(self, owner: str, memory_ids: Collection[str]) -> set[str]:
        """Which of `memory_ids` the store holds as `owner`'s, asked in one opening."""
        ...

    def replace(self, owner: str, old_id: str, new: Memory) -> None:
        """Write `new` and mark `old_id` (which `owner` must own: else `UserError`) superseded."""
        ...

    def forget(self, owner: str, memory_id: str) -> bool:
        """Erase one of `owner`'s memories; False when `owner` has none with that ID. Forgetting the
        live end of a chain of replacements brings the memory it replaced back into recall."""
        ...

    def current_of(self, owner: str, memory_id: str) -> str | None:
        """The live memory that (through a chain of replacements) replaced `memory_id`, if any."""
        ...

    def to_revive(self, owner: str, memory_id: str) -> Memory | None:
        """The memory that forgetting `memory_id` would bring back into recall (the one it replaced)."""
        ...

    def forget_user(self, owner: str) -> int:
        """Erase every memory of `owner`; returns how many went."""
        ...

    def prune(self, older_than: datetime) -> int:
        """Erase every memory made before `older_than`; returns how many went."""
        ...

    def holding(self, test: Callable[[Memory], bool]) -> builtins.list[Memory]:
        """Every memory, of any owner, that `test` picks: for erasure only (`forget
        --including-said-by`), never for recall."""
        ...

    def erase(self, ids: Collection[str]) -> int:
        """Erase the memories `ids` names, whoever owns them; returns how many went."""
        ...


class Embedder(Protocol):
    """Turns texts into dense vectors of `dimension` floats; `name` identifies the model."""

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...
