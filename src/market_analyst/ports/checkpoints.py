"""The checkpoint ports: a ready saver with its per-thread lease, and the application's own index of
threads beside it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ThreadRow:
    """A thread as the operator lists it: who, what, where it stands, and when (UTC ISO times)."""

    thread_id: str
    user_id: str
    ticker: str
    status: str
    created_at: str
    updated_at: str
    drafted_at: str | None = None
    revision: int = 0
    recommendation: str | None = None


@dataclass(frozen=True)
class ThreadQuery:
    """Which threads to list: every filter given must match; newest update first."""

    statuses: tuple[str, ...] = ()
    user_id: str | None = None
    ticker: str | None = None
    finished_before: str | None = None  # last updated at or before this UTC ISO time
    limit: int = 50
    offset: int = 0


class ThreadIndex(Protocol):
    """The application's own list of threads, beside the saver's checkpoints, so that listing and
    filtering never read every thread's state. A cache the workflow keeps current; the saver is the
    truth, and rows that listing shows are checked against it."""

    def record(self, row: ThreadRow) -> None:
        """Insert or replace the thread's row."""
        ...

    def remove(self, thread_id: str) -> None:
        """Drop the thread's row and its waiting memories' mark (nothing when there is none)."""
        ...

    def owner(self, thread_id: str) -> str | None:
        """The user who started the thread, or None when it has no row."""
        ...

    def query(self, query: ThreadQuery) -> tuple[list[ThreadRow], int]:
        """The rows matching `query`, newest update first, at most `query.limit`; and how many match."""
        ...

    def ids(self) -> set[str]:
        """The thread IDs that have a row."""
        ...

    def complete(self) -> bool:
        """Whether every thread the saver holds has a row (false until the first backfill)."""
        ...

    def mark_complete(self) -> None:
        """Record that a backfill gave every thread a row."""
        ...

    def hold_memories(self, thread_id: str, start: int) -> str:
        """Record that the thread's memory outbox may gain entries from `start` on that the memory
        store does not hold yet (an earlier, smaller `start` is kept); returns this hold's token.
        Call it holding the thread's lease."""
        ...

    def held_memories(self) -> dict[str, tuple[int, str]]:
        """Each thread whose outbox waits for the memory store: the first entry it waits on, and
        the token of its last hold."""
        ...

    def memory_hold(self, thread_id: str) -> tuple[int, str] | None:
        """The thread's hold (first entry, token), or None when nothing of it waits."""
        ...

    def release_memories(self, thread_id: str, token: str) -> bool:
        """Record that the memory store holds every entry of the thread's outbox, unless a hold
        newer than `token` came since (then it stays); whether it was released."""
        ...


class CheckpointBackend(Protocol):
    """A ready saver and the lease that keeps one writer per thread on the same backend."""

    saver: Any
    description: str

    @property
    def index(self) -> ThreadIndex:
        """The thread index on the same backend."""
        ...

    @property
    def keeps_history(self) -> bool:
        """False for a saver that keeps only each thread's latest checkpoint (no time travel)."""
        ...

    # The exceptions that mean "the store went away mid-command" on this backend.
    outage_errors: tuple[type[BaseException], ...]

    @property
    def restart_hint(self) -> str:
        """What brings the store back ("when the server is back"; an embedded server restarts)."""
        ...

    def lease(self, thread_id: str) -> AbstractContextManager[None]:
        """Hold the thread's lease for the block, or raise `ThreadBusy` at once."""
        ...

    def thread_ids(self) -> list[str]:
        """Every thread with at least one checkpoint."""
        ...

    def seal_thread(self, thread_id: str) -> int:
        """Re-write what the thread holds in clear under its data key, at once (a kill leaves it old
        or new); how many values were sealed. Call it holding the thread's lease."""
        ...

    def rekey_thread(self, thread_id: str, change: Callable[[str, Any], Any]) -> int:
        """Re-write every value of the thread through `change(channel, value)` (a value it leaves
        alone comes back as it was) under a new data key, at once, then erase the old key, so every
        older copy is unreadable; how many values changed. Call it holding the thread's lease."""
        ...

    def rekey_interrupted(self, thread_id: str) -> bool:
        """Whether a re-keying of the thread was killed before its new key was promoted (the next
        `rekey_thread` finishes it)."""
        ...

    def erase_thread(self, thread_id: str) -> int:
        """Delete the thread's checkpoints (the saver's `delete_thread`) and any lease keys; returns
        how many lease keys went. Call it holding the thread's lease."""
        ...
