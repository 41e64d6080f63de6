"""`Deps`, the runtime context LangGraph hands every node, and the null stores a graph built without
them uses.

Nothing here opens a store: `deps.py` builds the real adapters into a `Deps`, and the nodes see only
the ports (`market_analyst.ports`) it holds.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from market_analyst.choices import RecallMode
from market_analyst.decisions import DecisionPolicy, DecisionSeal, Identity, process_seal
from market_analyst.ports import (
    Analyst,
    ArchiveWriter,
    AuditEvent,
    AuditWriter,
    ChatModel,
    Event,
    EventOutbox,
    MarketDataProvider,
    MemoryStore,
    ProfileReader,
)
from market_analyst.state import Memory


class _NoAudit:
    """For graphs built without a log (a test's bare graph): appends nothing."""

    def append(self, event: AuditEvent) -> dict[str, Any]:
        return {}


class _NoEvents:
    """For graphs that notify no one (no webhook is configured, or a test's bare graph): keeps nothing."""

    def put(self, event: Event) -> None:
        return None


class _NoMemory:
    """For graphs built without a memory store (a test's bare graph): remembers nothing."""

    def at_once(self) -> _NoMemory:
        return self

    def kept(self, owner: str, memory_ids: Collection[str]) -> set[str]:
        return set()

    def write(self, memories: Sequence[Memory]) -> None:
        return None

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
        return []

    def trail(self, owner: str, ticker: str, *, limit: int = 3) -> tuple[list[Memory], int]:
        return [], 0

    def verify(self) -> None:
        return None

    def has_memories(self, owner: str) -> bool:
        return False

    def list(self, owner: str, *, include_superseded: bool = False) -> list[Memory]:
        return []

    def get(self, owner: str, memory_id: str) -> Memory | None:
        return None

    def replace(self, owner: str, old_id: str, new: Memory) -> None:
        return None

    def forget(self, owner: str, memory_id: str) -> bool:
        return False

    def forget_user(self, owner: str) -> int:
        return 0

    def prune(self, older_than: datetime) -> int:
        return 0

    def holding(self, test: Callable[[Memory], bool]) -> builtins.list[Memory]:
        return []

    def current_of(self, owner: str, memory_id: str) -> str | None:
        return None

    def to_revive(self, owner: str, memory_id: str) -> Memory | None:
        return None

    def erase(self, ids: Collection[str]) -> int:
        return 0


@dataclass(frozen=True)
class Deps:
    """What the nodes use, passed as LangGraph's runtime context: never stored in a checkpoint."""

    market_data: MarketDataProvider
    profiles: ProfileReader
    archive: ArchiveWriter
    analyst: Analyst  # the built-in rules: the whole analysis, or the LLM analyst's baseline
    model: ChatModel | None = None  # set: the LLM analyst, an agent loop of model turns and tool calls
    max_steps: int = 6  # model turns the agent may take before it must answer
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))  # the clock (SOURCE_DATE_EPOCH)
    policy: DecisionPolicy = field(default_factory=DecisionPolicy)  # who may decide, and how many approve
    audit: AuditWriter = field(default_factory=_NoAudit)
    identity: Identity | None = None  # who decides in this run, as the application's door knows them
    memory: MemoryStore = field(default_factory=_NoMemory)  # what the owner said in earlier threads
    seal: DecisionSeal = field(default_factory=process_seal)  # seals what the gate accepts
    # Whether the nodes also write what they remember into `memory` at once: only for a door that
    # copies no memory outbox after the run (LangGraph's server). Elsewhere the decision never waits
    # on the memory store: the command copies the outbox after it (workflow/memory_outbox.py).
    write_memories: bool = False
    events: EventOutbox = field(default_factory=_NoEvents)  # what people are told (notifications)
