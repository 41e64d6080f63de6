"""The graph state and the models behind it.

The state holds plain data only (strings, numbers, lists, dicts) so every checkpointer serialises it
without custom types; the pydantic models validate that data where it is made and read.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Required

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import TypedDict

from market_analyst.choices import Horizon, MemoryKind, RiskTolerance
from market_analyst.errors import UserError
from market_analyst.formatting import emoji_joiners

RISK_TOLERANCES: tuple[str, ...] = ("conservative", "moderate", "aggressive")
HORIZONS: tuple[str, ...] = ("short", "medium", "long")

# User IDs: letters, digits and . _ @ - (an e-mail address fits), 1 to 64 characters.
USER_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
# Thread IDs: the same characters plus ':', 1 to 128 characters.
THREAD_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
DEFAULT_USER = "local"
# Profile limits: a sector is a short label such as "semiconductors" or "health care"; notes are a line or
# two for the reader, not a document. Both end up in every draft, so they stay small.
SECTOR_PATTERN = re.compile(r"^[^\W_][\w &./+-]{0,39}$")
MAX_SECTORS = 20
MAX_NOTES_CHARS = 500
# The shape of the graph state, written into every thread when it starts (`schema_version`). A thread
# without it was started by 0.1.0 or earlier (schema 1). Raise it whenever a state key is added,
# removed, renamed or changes meaning, and register how to read the previous schema in
# `workflow/upgrade.py`: threads wait at the gate for days, across upgrades.
SCHEMA_VERSION = 6
# A question is a sentence or a paragraph: a longer one is refused before a run starts.
MAX_QUESTION_CHARS = 2000


def validate_user_id(raw: str) -> str:
    """Return `raw` if it is a valid user ID, else raise `UserError`."""
    if not USER_ID_PATTERN.fullmatch(raw):  # not match: '$' would accept a trailing newline
        shown = raw if len(raw) <= 20 else raw[:20] + "..."
        raise UserError(
            f"invalid user ID {shown!r}: use 1-64 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit"
        )
    return raw


def parse_sectors(raw: str) -> list[str]:
    """`"a, b,,a"` -> `["a", "b"]`: comma-separated, trimmed, empty and repeated entries dropped."""
    seen: dict[str, None] = {}
    for part in raw.split(","):
        part = part.strip()
        if part:
            seen.setdefault(part, None)
    return list(seen)


def validate_thread_id(raw: str) -> str:
    """Return `raw` if it is a valid thread ID, else raise `UserError`."""
    if not THREAD_ID_PATTERN.fullmatch(raw):
        shown = raw if len(raw) <= 20 else raw[:20] + "..."
        raise UserError(f"invalid thread ID {shown!r}: use 1-128 letters, digits, '.', '_', ':', '@' or '-'")
    return raw


class Profile(BaseModel):
    """A user's risk profile, as stored and as used by a run."""

    model_config = ConfigDict(extra="forbid")

    user_id: str
    risk_tolerance: RiskTolerance = "moderate"
    horizon: Horizon = "medium"
    preferred_sectors: list[str] = Field(default_factory=list)
    notes: str = ""
    updated_at: str | None = None

    @field_validator("user_id")
    @classmethod
    def _user_id(cls, value: str) -> str:
        if not USER_ID_PATTERN.fullmatch(value):
            raise ValueError("user ID must be 1-64 letters, digits, '.', '_', '@' or '-'")
        return value

    @field_validator("preferred_sectors")
    @classmethod
    def _sectors(cls, value: list[str]) -> list[str]:
        if len(value) > MAX_SECTORS:
            raise ValueError(f"at most {MAX_SECTORS} preferred sectors")
        for sector in value:
            if not SECTOR_PATTERN.fullmatch(sector):
                shown = sector if len(sector) <= 20 else sector[:20] + "..."
                raise ValueError(
                    f"sector {shown!r}: use 1-40 letters, digits, spaces or . & / + -, "
                    "starting with a letter or digit"
                )
        return value

    @field_validator("notes")
    @classmethod
    def _notes(cls, value: str) -> str:
        if len(value) > MAX_NOTES_CHARS:
            raise ValueError(f"at most {MAX_NOTES_CHARS} characters (got {len(value)})")
        if any(ord(ch) < 32 and ch != "\n" for ch in value):
            raise ValueError("no control characters other than line breaks")
        return value

    @field_validator("updated_at")
    @classmethod
    def _updated_at(cls, value: str | None) -> str | None:
        if value is not None:
            datetime.fromisoformat(value)  # ValueError names the bad time stamp
        return value


class ProfileUsed(BaseModel):
    """The profile a run analysed with, and whether it was stored or the defaults."""

    source: Literal["stored", "default"]
    profile: Profile


class Approval(BaseModel):
    """A recorded decision on one draft: an approval that completed the quorum, or a rejection.

    `content_hash`, `verified`, `door` and `approvers` are absent from decisions recorded before the
    gate was an `interrupt()`; their defaults describe such a decision as what it was (a name typed
    at the command line, on a draft identified by its ID alone)."""

    decision: Literal["approved", "rejected"]
    by: str
    at: str
    note: str = ""
    draft_id: str
    content_hash: str | None = None
    verified: bool = False
    door: str = "cli"
    approvers: list[str] = Field(default_factory=list)  # everyone whose approval counted, in order


class Draft(BaseModel):
    """The report awaiting approval. Contains no time stamps: same inputs, same draft."""

    draft_id: str
    revision: int
    ticker: str
    question: str
    headline: str
    recommendation: Literal["buy", "hold", "sell"]
    confidence: float
    score: float
    summary: str
    framing: str
    risk_factors: list[str]
    figures: dict[str, Any]
    data_source: str
    as_of: str
    analyst: dict[str, str]
    profile: dict[str, Any]
    options: dict[str, str] = Field(default_factory=dict)  # choices made with `revise` for this thread
    feedback: list[str]
    feedback_notes: list[dict[str, Any]] = Field(default_factory=list)  # per item: what the analyst did
    facts: list[str] = Field(default_factory=list)  # what the analyst was given and found, one per line
    # What the owner said before (recall): per memory its id, date, kind, thread_id, ticker and text;
    # and what the analyst did with them.
    memories: list[dict[str, Any]] = Field(default_factory=list)
    memory_response: str = ""
    chart: dict[str, Any] | None = None  # analyst.chart_data.chart_series
    markdown: str


# A memory is a note of a line or a paragraph: a reviewer's feedback, a reason, a report's summary.
MAX_MEMORY_CHARS = 1000
MEMORY_KINDS: tuple[str, ...] = ("feedback", "rejection", "approval_note", "report", "remembered")
# The kinds a thread's decisions and publication leave (a ticker's decision trail), in the order a
# thread leaves them.
TRAIL_KINDS: tuple[str, ...] = ("feedback", "rejection", "approval_note", "report")
# The namespace of memory IDs: fixed, so the same source gives the same ID on every machine.
_MEMORY_NAMESPACE = uuid.UUID("5b0c2a52-4f4e-4b8e-9a57-6d656d6f7279")


def memory_id(kind: str, *source: str) -> str:
    """The ID of the memory of `kind` that `source` (thread, draft, who, ...) gives: the same
    decision recorded twice, or re-run after a crash, has one ID and so is one memory."""
    return str(uuid.uuid5(_MEMORY_NAMESPACE, "\x1f".join((kind, *source))))


# What a memory's text may not hold: control and format characters, surrogates, line and paragraph
# separators. Characters this Python's Unicode tables do not know yet (a recent emoji) are data.
UNWRITABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def check_memory_text(text: str) -> str:
    """`text` stripped, if it is 1 to 1000 characters with no control characters; else `UserError`."""
    text = text.strip()
    if not text:
        raise UserError("a memory needs some text: it is empty")
    if len(text) > MAX_MEMORY_CHARS:
        raise UserError(f"a memory is at most {MAX_MEMORY_CHARS} characters; this one has {len(text)}")
    if text.isprintable():  # no character of any unwritable category: the common case, at C speed
        return text
    joiners = emoji_joiners(text)
    for at, char in enumerate(text):
        if unicodedata.category(char) in UNWRITABLE_CATEGORIES and at not in joiners:
            raise UserError(
                f"a memory cannot hold control characters (found U+{ord(char):04X}): write it on one line"
            )
    return text


# What ends a memory's text that was cut to fit (`memory_text`): the reader sees that more was said.
CUT_MARK = "…"


def memory_text(raw: str) -> str:
    """Recorded text (a note, a report's summary) as a memory's text: control characters become
    spaces (a joiner inside an emoji stays), runs of spaces one, and a text over the memory limit cut
    at a word and marked with `CUT_MARK`, so what the workflow writes always passes
    `check_memory_text` (the whole text stays where it was recorded)."""
    joiners = emoji_joiners(raw)
    cleaned = "".join(
        " " if unicodedata.category(ch) in UNWRITABLE_CATEGORIES and at not in joiners else ch
        for at, ch in enumerate(raw)
    )
    text = " ".join(cleaned.split())
    if len(text) <= MAX_MEMORY_CHARS:
        return text
    cut = text[: MAX_MEMORY_CHARS - len(CUT_MARK)]
    at_word = cut.rsplit(" ", 1)[0] if " " in cut[-80:] else cut  # a word boundary near the end
    return at_word.rstrip() + CUT_MARK


class Memory(BaseModel):
    """What a person said (or a published report concluded) that later runs for its owner recall.

    Written by the workflow from a recorded source, never by a model: `kind` says what it was, and
    the source fields say where it came from. A memory is data: nothing in its text changes a rule."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    owner: str
    kind: MemoryKind
    text: str
    ticker: str | None = None
    created_at: datetime
    thread_id: str | None = None
    draft_id: str | None = None
    archive_key: str | None = None
    said_by: str | None = None
    verified: bool = False
    replaces: str | None = None
    superseded: bool = False

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        return validate_user_id(value)

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        return check_memory_text(value)

    @field_validator("id", "replaces")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        if value is not None:
            check_memory_ref(value)
        return value

    @field_validator("created_at")
    @classmethod
    def _created_at(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("created_at must carry its time zone (UTC)")
        return value.astimezone(UTC)


def check_memory_ref(raw: str) -> str:
    """Return `raw` if it has the shape of a memory ID (a UUID), else `UserError`."""
    try:
        return str(uuid.UUID(raw)) if len(raw) == 36 else _bad_memory_ref(raw)
    except ValueError:
        return _bad_memory_ref(raw)


def _bad_memory_ref(raw: str) -> str:
    shown = raw if len(raw) <= 20 else raw[:20] + "..."
    raise UserError(f"invalid memory ID {shown!r}: a memory ID is a UUID, as `memories list` shows it")


class Publication(BaseModel):
    """Where an approved report landed in the archive."""

    key: str
    operation_id: str
    created: bool


class AnalystState(TypedDict, total=False):
    """The graph state: small, plain, and free of raw price series.

    A `typing_extensions.TypedDict`: on Python 3.11 LangGraph (through pydantic) can describe only
    that kind as an input schema (`get_input_jsonschema`, LangGraph server and Studio)."""

    ticker: str
    question: str
    user_id: str
    profile: dict[str, Any]  # ProfileUsed: the stored profile (or the defaults) as load_profile read it
    recalled: list[dict[str, Any]]  # Memory: what the owner said before, as recall found it for this run
    overrides: dict[str, str]  # risk_tolerance / horizon chosen for this thread with `revise`
    market: dict[str, Any]  # figures, chart (a coarse series for the chart), as_of, data_source
    analysis: dict[str, Any] | None  # recommendation, confidence, score, risk factors, analyst, facts
    feedback: list[str]
    messages: Annotated[list[AnyMessage], add_messages]  # the LLM analyst's turns for this revision
    agent_steps: int  # model turns the LLM analyst took for this revision
    draft: dict[str, Any]  # Draft
    drafted_at: str  # when the draft was made (UTC); kept out of the draft, which has no time stamp
    expired: dict[str, Any] | None  # {"draft_id", "at"}: the draft whose expiry was recorded
    started_at: str  # when the thread started (UTC)
    schema_version: int  # SCHEMA_VERSION of the code that started the thread; absent: 1 (0.1.0 or earlier)
    approval: dict[str, Any] | None  # Approval
    approvals: list[dict[str, Any]]  # the current draft's sealed approvals so far (decisions.Decision)
    decision: dict[str, Any] | None  # the sealed decisions.Decision the gate accepted, until record_decision
    refused: str | None  # why the gate's last answer was not taken (the request says it when it asks again)
    publication: dict[str, Any] | None  # Publication
    # Memory: what the thread's decisions and publication leave to remember, written here where they
    # are recorded and copied into the memory store afterwards (workflow/memory_outbox.py).
    memory_outbox: list[dict[str, Any]]


class ServerInput(TypedDict, total=False):
    """What a run on LangGraph's server (and Studio's form) may start a thread with: the ticker and
    the question; `user_id` only an operator may set (for everyone else the server's auth handler
    makes it the caller). The rest of the state is the graph's to write, never the caller's."""

    ticker: Required[str]
    question: str
    user_id: str
