"""The ports: what the graph's nodes and the workflow depend on, as protocols, and `Deps`, the runtime
context LangGraph hands every node.

Nothing here opens a store or imports a client library: `deps.py` builds the real adapters and
`persistence/checkpoints/factory.py` opens the checkpointer; the nodes see only these shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from market_analyst.choices import RecallMode
from market_analyst.decisions import DecisionPolicy, DecisionSeal, Identity, process_seal
from market_analyst.state import Memory, Profile, ProfileUsed

if TYPE_CHECKING:
    from market_analyst.market_data.base import PriceHistory


class MarketDataProvider(Protocol):
    """Loads a ticker's daily history; raises `UserError` when it has none."""

    name: str

    def load(self, ticker: str) -> PriceHistory:
        """The ticker's daily adjusted closes, ascending by date."""
        ...

    def describe(self, as_of: str) -> str:
        """How a report names this source, e.g. "bundled snapshot, as of 2025-02-14"."""
        ...


class ProfileReader(Protocol):
    """Reads one user's stored profile by exact user ID; None when there is none."""

    def get(self, user_id: str) -> Profile | None:
        """The profile stored for exactly `user_id`, or None."""
        ...


def profile_in_use(profiles: ProfileReader, user_id: str) -> ProfileUsed:
    """The profile a run for `user_id` uses: the stored one, or the stated defaults."""
    stored = profiles.get(user_id)
    if stored is not None:
        return ProfileUsed(source="stored", profile=stored)
    return ProfileUsed(source="default", profile=Profile(user_id=user_id))


class Analyst(Protocol):
    """Turns figures and a profile into recommendation, confidence, risk factors and framing."""

    def analyse(
        self, ticker: str, figures: dict[str, Any], profile: Profile, feedback: list[str]
    ) -> dict[str, Any]:
        """The judgement of `figures` for `profile`, taking reviewer `feedback` into account."""
        ...


class ChatModel(Protocol):
    """One turn of a chat model that can call tools (the LLM analyst's agent loop)."""

    name: str

    def respond(self, messages: list[Any], tools: list[Any], *, answer_now: bool) -> Any:
        """The model's next message given the conversation; with `answer_now` it must submit its answer."""
        ...


@dataclass(frozen=True)
class PublishResult:
    """The stored document and whether this call wrote it (False: it already existed)."""

    key: str
    document: dict[str, Any]
    created: bool


@dataclass(frozen=True)
class PublishRequest:
    """One publication: the approved draft, its approval, and the operation they make up."""

    operation_id: str  # thread ID + draft ID: a repeat of the same publication is the same operation
    thread_id: str
    user_id: str | None
    draft: dict[str, Any]
    approval: dict[str, Any]


class ArchiveWriter(Protocol):
    """Stores an approved draft once per operation; a repeat returns the stored document."""

    def publish_report(self, request: PublishRequest) -> PublishResult:
        """Write the report `request` describes, unless this operation was written already."""
        ...


@dataclass(frozen=True)
class ReportSummary:
    """The fields `reports list` and `reports search` show, as an archive's index keeps them."""

    key: str
    ticker: str
    user_id: str | None
    created_at: str
    approved_by: str
    recommendation: str
    as_of: str
    headline: str

    def to_json(self) -> dict[str, Any]:
        """The summary as plain data."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Listing:
    """Summaries of readable documents, one line for each document that could not be read, and how
    many more matched than were listed."""

    reports: list[ReportSummary]
    problems: list[str]
    more: int = 0


class ReportStore(ArchiveWriter, Protocol):
    """The whole report archive as commands use it, whichever backend holds it (a directory of JSON
    documents, or PostgreSQL with `MA_RECORDS=postgres`): exactly-once writes, reads by key, listing
    and search newest first, and removal for `forget`."""

    @property
    def location(self) -> str:
        """Where the archive is, for messages (a directory, or a redacted database address)."""
        ...

    def publish(self, key: str, document: dict[str, Any]) -> PublishResult:
        """Store `document` under `key` once; the same document again returns the stored one, other
        content under the same key or operation is refused (`UserError`), never overwritten."""
        ...

    def get(self, key: str) -> dict[str, Any] | None:
        """The document under `key`, None if there is none."""
        ...

    def remove(self, key: str) -> bool:
        """Delete the document under `key`; False when there was none."""
        ...

    def search(
        self,
        *,
        ticker: str | None = None,
        user_id: str | None = None,
        text: str | None = None,
        limit: int = 1_000_000,
    ) -> Listing:
        """The newest `limit` reports matching every filter given, and how many more matched."""
        ...

    def list(self) -> Listing:
        """Every readable report, newest first."""
        ...

    def check(self) -> str:
        """ "ok" when the archive can be written, else one line saying why not."""
        ...


@dataclass(frozen=True)
class AuditEvent:
    """One decision or publication, as the audit log records it. `event_id` names the event itself
    (a node re-run after a crash appends the same event, which the log keeps once)."""

    event_id: str
    action: str  # approved, rejected, revised, published
    at: str  # UTC ISO time
    thread_id: str | None = None
    draft_id: str | None = None
    content_hash: str | None = None
    revision: int | None = None
    actor: str | None = None  # who decided (personal: erased by `forget`)
    verified: bool = False
    door: str = ""
    requester: str | None = None  # whom the analysis was for (personal)
    note: str = ""  # the note, reason or feedback (personal)
    archive_key: str | None = None


class AuditWriter(Protocol):
    """Appends to the audit log, kept apart from the checkpoints; an event seen before is kept once."""

    def append(self, event: AuditEvent) -> dict[str, Any]:
        """Append `event` (unless its `event_id` is in the log already) and return its entry."""
        ...


class _NoAudit:
    """For graphs built without a log (a test's bare graph): appends nothing."""

    def append(self, event: AuditEvent) -> dict[str, Any]:
        return {}


class MemoryStore(Protocol):
    """What people said in earlier threads, per owner: written by the workflow from recorded sources,
    recalled by meaning and words. Every read is filtered by owner; superseded memories are never
    recalled. Nothing is embedded (no model loaded) for an owner who has no memories."""

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
    ) -> list[Memory]:
        """At most `limit` of `owner`'s live memories most relevant to `query` (and `ticker`), best
        first, whose texts together fit in `budget_chars`; [] at once when the owner has none."""
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

    def replace(self, owner: str, old_id: str, new: Memory) -> None:
        """Write `new` and mark `old_id` (which `owner` must own: else `UserError`) superseded."""
        ...

    def forget(self, owner: str, memory_id: str) -> bool:
        """Erase one of `owner`'s memories; False when `owner` has none with that ID."""
        ...

    def forget_user(self, owner: str) -> int:
        """Erase every memory of `owner`; returns how many went."""
        ...

    def prune(self, older_than: datetime) -> int:
        """Erase every memory made before `older_than`; returns how many went."""
        ...


class _NoMemory:
    """For graphs built without a memory store (a test's bare graph): remembers nothing."""

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
    ) -> list[Memory]:
        return []

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
        """Drop the thread's row (nothing when there is none)."""
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

    def erase_thread(self, thread_id: str) -> int:
        """Delete the thread's checkpoints (the saver's `delete_thread`) and any lease keys; returns
        how many lease keys went. Call it holding the thread's lease."""
        ...
