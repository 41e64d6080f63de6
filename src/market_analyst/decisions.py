"""The decision model: what the approval gate asks, what a decision must say, the one rule that
says whether it may be made, and the seal that proves a decision was made at the gate.

The gate (`nodes/human_review.py`) sends a `DecisionRequest` with LangGraph's `interrupt()`; a
decision comes back as the resume value and is validated as a `Decision` before anything changes.
Every door (the CLI, the web inbox, the API, LangGraph's own server) goes through `refusal`, so a
decision is bound to the draft it was made on, made by someone entitled to it, and counted once.

A decision the gate accepts is sealed: an HMAC, with a key kept in the records store, over the
thread, the draft, its content hash, who decided, through which door and when. `record_decision`
and `publish` act only on sealed decisions, so whoever can write a thread's state (LangGraph's
`update_state`, a `Command(goto=...)`, a fork or a copy) cannot make a decision or a publication:
they can copy a seal, never make one, and a seal names the thread and the exact text it was made on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from market_analyst.deadlines import Deadlines
from market_analyst.errors import UserError
from market_analyst.state import HORIZONS, RISK_TOLERANCES, USER_ID_PATTERN

# `expire` is the deadline's own decision: taken only once the draft's expiry has passed, from anyone
# (the worker that keeps due times sends it), and it approves, rejects and publishes nothing.
Action = Literal["approve", "reject", "revise", "expire"]
ClientAction = Literal["approve", "reject", "revise"]  # what a person may send: never `expire`
Door = Literal["cli", "web", "api", "langgraph", "deadline"]
# What each role may decide: a requester asks for analyses and decides nothing; a reviewer revises
# (and comments with the feedback); an approver also approves and rejects. An operator repairs
# (forks, state writes, deletes) and decides nothing: whoever can write a thread's state cannot decide.
ROLE_ACTIONS: dict[str, frozenset[str]] = {
    "requester": frozenset(),
    "reviewer": frozenset({"revise"}),
    "approver": frozenset({"approve", "reject", "revise"}),
    "operator": frozenset(),
}
_ROLE_LIMITS = {
    "requester": "a requester asks for analyses and decides none",
    "reviewer": "a reviewer may only revise",
    "approver": "",
    "operator": "an operator repairs threads and decides none",
}
ACTIONS: tuple[str, ...] = ("approve", "reject", "revise")
MAX_NOTE_CHARS = 2000


def content_hash(markdown: str) -> str:
    """The SHA-256 of a draft's rendered Markdown: what the approver read, byte for byte."""
    return hashlib.sha256(markdown.encode()).hexdigest()


def draft_digest(draft: dict[str, Any]) -> str:
    """The SHA-256 of the whole draft as the archive would store it (its Markdown, and the structured
    report beside it: recommendation, figures, headline...), canonical JSON: what a seal binds, so
    no field of the published report can change after it was approved."""
    canonical = json.dumps(draft, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class DecisionRefused(UserError):
    """A decision the rule refuses: `status` is the HTTP status a web door answers with (403: not
    entitled; 409: not on the current draft, or already counted). Nothing was recorded."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ApprovalSoFar(BaseModel):
    """One approval of the current draft, as the request lists it."""

    by: str
    at: str
    verified: bool
    door: str


class DecisionRequest(BaseModel):
    """What the gate asks a person: the interrupt's payload, read by every door.

    `action_request`, `config` and `description` make it a `HumanInterrupt` as Agent Inbox reads
    one (the draft's Markdown is the description; only accept and respond are offered); the project's
    own fields stand beside them. `refused` says why the last answer was not taken, when one was not."""

    kind: Literal["approval_request"] = "approval_request"
    thread_id: str
    ticker: str
    draft_id: str
    revision: int
    content_hash: str
    headline: str
    requested_by: str | None
    allowed_actions: list[str]
    approvals: list[ApprovalSoFar]
    approvals_needed: int
    drafted_at: str | None = None
    due_at: str | None = None  # MA_DECISION_DUE after the request
    expires_at: str | None = None  # MA_EXPIRE_AFTER after the request: no approval from then on
    expired_at: str | None = None  # when the expiry was recorded (the thread's status is then expired)
    refused: str | None = None
    action_request: dict[str, Any] | None = None
    config: dict[str, bool] | None = None
    description: str | None = None


INBOX_CONFIG = {"allow_ignore": False, "allow_respond": True, "allow_edit": False, "allow_accept": True}
INBOX_ACTION = "Approve report"


def inbox_fields(draft_id: str, digest: str, headline: str, markdown: str) -> dict[str, Any]:
    """The `HumanInterrupt` part of a request: what Agent Inbox shows and which answers it offers."""
    return {
        "action_request": {
            "action": INBOX_ACTION,
            "args": {"draft_id": draft_id, "content_hash": digest, "headline": headline},
        },
        "config": dict(INBOX_CONFIG),
        "description": markdown,
    }


class Decision(BaseModel):
    """A decision on one draft, as the gate records it. `note` is the approval note, the rejection
    reason or the revise feedback. `by`, `at`, `verified` and `door` come from the door the decision
    arrived through, never from what a client sent; `seal` proves the gate accepted exactly this
    decision on this thread (see `DecisionSeal`), on this whole draft, for this requester."""

    model_config = ConfigDict(extra="forbid")

    action: Action
    draft_id: str = Field(min_length=1, max_length=64)
    content_hash: str | None = Field(None, max_length=64)
    by: str
    note: str = Field("", max_length=MAX_NOTE_CHARS)
    at: str | None = None
    verified: bool = False
    door: Door = "langgraph"
    options: dict[str, str] = Field(default_factory=dict)  # revise: question, risk_tolerance, horizon
    draft_digest: str | None = None  # the whole draft decided on (set by the gate)
    requester: str | None = None  # whom the analysis was for, as the gate saw it (separation of duties)
    seal: str | None = None

    @field_validator("by")
    @classmethod
    def _by(cls, value: str) -> str:
        if not USER_ID_PATTERN.fullmatch(value):
            raise ValueError("by must be 1-64 letters, digits, '.', '_', '@' or '-'")
        return value

    @field_validator("note")
    @classmethod
    def _note(cls, value: str) -> str:
        # Kept as written (control characters too): it is data, and every rendering neutralises it.
        return value.strip()

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, str]) -> dict[str, str]:
        allowed = {"question": None, "risk_tolerance": RISK_TOLERANCES, "horizon": HORIZONS}
        for key, option in value.items():
            if key not in allowed:
                raise ValueError(f"unknown option {key!r}: use question, risk_tolerance or horizon")
            choices = allowed[key]
            if choices is not None and option not in choices:
                raise ValueError(f"{key} must be one of {', '.join(choices)}")
            if key == "question" and (len(option) > MAX_NOTE_CHARS or "\x00" in option):
                raise ValueError(f"question: at most {MAX_NOTE_CHARS} characters")
        return value


class ClientDecision(BaseModel):
    """What a client of LangGraph's server sends to resume the gate: the decision, never who made
    it or when (the server's authenticated caller and clock say that). `by`, if sent, must name the
    caller."""

    model_config = ConfigDict(extra="forbid")

    action: ClientAction
    draft_id: str = Field(min_length=1, max_length=64)
    content_hash: str | None = Field(None, max_length=64)
    by: str | None = None
    note: str = Field("", max_length=MAX_NOTE_CHARS)
    options: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class Identity:
    """Who decides, as the door that took the decision knows them: `verified` when the door
    authenticated them (a signed-in web or API approver), not when a name was typed (the CLI)."""

    name: str
    verified: bool
    door: Door


@dataclass(frozen=True)
class DecisionPolicy:
    """The settings the rule reads: `MA_APPROVERS`, `MA_REQUIRED_APPROVALS`, `MA_ALLOW_SELF_APPROVAL`,
    and the role each registered approver holds (None: not registered)."""

    required_approvals: int = 1
    allowed: frozenset[str] = frozenset()
    allow_self_approval: bool = False
    role_of: Callable[[str], str | None] = field(default=lambda name: None)
    max_draft_age: float | None = None  # MA_MAX_DRAFT_AGE in seconds: older drafts are not approved
    deadlines: Deadlines = field(default_factory=Deadlines)  # due times, reminders, expiry


def refusal(
    policy: DecisionPolicy, request: DecisionRequest, decision: Decision, *, reread: str | None = None
) -> DecisionRefused | None:
    """Why `decision` may not be made on the draft `request` asks about, or None: the one rule of
    every door. Checked in this order: the draft, the allow-list, the role, separation of duties,
    and a second approval by the same person. `reread` says how this door's user reads the current
    draft again (default: `market-analyst status`)."""
    if decision.draft_id != request.draft_id or (
        decision.content_hash is not None and decision.content_hash != request.content_hash
    ):
        which = (
            f"draft {decision.draft_id}"
            if decision.draft_id != request.draft_id
            else f"content hash {decision.content_hash[:12]} of draft {decision.draft_id}"
            if decision.content_hash
            else decision.draft_id
        )
        how = reread or f"read it with 'market-analyst status {request.thread_id}'"
        return DecisionRefused(
            409,
            f"{which} is not the current draft of thread {request.thread_id}: revision {request.revision} "
            f"(draft {request.draft_id}) is; {how} and decide on it again",
        )
    if decision.action == "expire":
        if decision.door != "deadline":
            return DecisionRefused(403, "an expiry is recorded by the deadline's own worker, never sent")
        if request.expired_at:
            return DecisionRefused(409, f"draft {request.draft_id} expired already, at {request.expired_at}")
        if request.expires_at is None or _reached(decision.at, request.expires_at) is not True:
            return DecisionRefused(
                409,
                f"draft {request.draft_id} of thread {request.thread_id} does not expire "
                + (f"before {request.expires_at}" if request.expires_at else "(MA_EXPIRE_AFTER is not set)"),
            )
        return None
    if decision.action == "approve" and (
        request.expired_at or (request.expires_at and _reached(decision.at, request.expires_at) is not False)
    ):
        return DecisionRefused(
            409,
            f"draft {request.draft_id} of thread {request.thread_id} expired at "
            f"{request.expired_at or request.expires_at} (MA_EXPIRE_AFTER) and can no longer be approved; "
            f"a revise drafts it again ('market-analyst revise {request.thread_id} --feedback ...')",
        )
    if policy.allowed and decision.by not in policy.allowed:
        return DecisionRefused(
            403,
            f"{decision.by!r} may not {decision.action}: MA_APPROVERS allows "
            f"{', '.join(sorted(policy.allowed))}",
        )
    role = policy.role_of(decision.by)
    if role is not None and decision.action not in ROLE_ACTIONS.get(role, frozenset()):
        limit = _ROLE_LIMITS.get(role) or "that role may not"
        return DecisionRefused(403, f"{decision.by!r} is a {role} and may not {decision.action}: {limit}")
    if (
        decision.action == "approve"
        and decision.verified
        and request.requested_by == decision.by
        and not policy.allow_self_approval
    ):
        return DecisionRefused(
            403,
            f"{decision.by!r} asked for this analysis and may not approve it (separation of duties; "
            "MA_ALLOW_SELF_APPROVAL=true allows it in a one-person set-up)",
        )
    if decision.action == "approve" and any(a.by == decision.by for a in request.approvals):
        return DecisionRefused(
            409,
            f"{decision.by!r} has already approved draft {request.draft_id}: "
            f"{approvals_text(len(request.approvals), request.approvals_needed)}; "
            "another approver must approve",
        )
    return None


def approvals_text(count: int, needed: int) -> str:
    """ "1 of 2 approvals"."""
    return f"{count} of {needed} approval{'s' if needed != 1 else ''}"


class DecisionSeal:
    """Seals decisions the gate accepts, and checks seals: an HMAC-SHA256 over the thread ID and every
    field of the decision, keyed by a secret of the records store (`key`, read again after
    `KEY_SECONDS`, so a long-running server sees a changed secret within that time). A state writer
    can copy a seal, never make one; a copied seal is valid only for the very decision, thread and
    text it was made for."""

    KEY_SECONDS = 30.0

    def __init__(self, key: Callable[[], bytes], purpose: bytes = b"gate") -> None:
        self._read_key = key
        self._purpose = purpose
        self._cached: tuple[float, bytes] | None = None

    def for_doors(self) -> DecisionSeal:
        """The seal the application's own doors put on the answers they send the gate: keyed apart
        from the gate's, so a decision the gate sealed into the state cannot be sent back to it as
        an answer (it would be taken as a client's, and refused for its seal)."""
        return DecisionSeal(self._read_key, b"door")

    def _key(self) -> bytes:
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] > self.KEY_SECONDS:
            self._cached = (now, hmac.new(self._read_key(), self._purpose, hashlib.sha256).digest())
        return self._cached[1]

    @staticmethod
    def _message(thread_id: str, decision: Decision) -> bytes:
        fields = decision.model_dump(mode="json", exclude={"seal"})
        return json.dumps({"thread_id": thread_id, **fields}, sort_keys=True, separators=(",", ":")).encode()

    def seal(self, thread_id: str, decision: Decision) -> Decision:
        """`decision` with its seal for `thread_id`."""
        mac = hmac.new(self._key(), self._message(thread_id, decision), hashlib.sha256).hexdigest()
        return decision.model_copy(update={"seal": mac})

    def sealed(self, thread_id: str, raw: Any) -> Decision | None:
        """`raw` as a `Decision` if it carries a valid seal for `thread_id`, else None (malformed,
        unsealed, sealed for another thread, or changed after it was sealed)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("seal"), str):
            return None
        try:
            decision = Decision.model_validate(raw)
        except ValidationError:
            return None
        expected = hmac.new(self._key(), self._message(thread_id, decision), hashlib.sha256).hexdigest()
        return decision if hmac.compare_digest(expected, str(decision.seal)) else None


def process_seal() -> DecisionSeal:
    """A seal keyed by a secret of this process alone: for graphs built without a records store."""
    key = secrets.token_bytes(32)
    return DecisionSeal(lambda: key)


def seal_key(secret: str) -> bytes:
    """The sealing key derived from the records store's secret (kept apart from its other use)."""
    return hmac.new(secret.encode(), b"market-analyst decision seal v1", hashlib.sha256).digest()


def validated(
    raw: dict[str, Any],
    policy: DecisionPolicy,
    request: DecisionRequest,
    identity: Identity | None,
    now: Callable[[], str],
) -> Decision:
    """`raw` as a `Decision` the rule allows, or the `DecisionRefused` (or `UserError`) that says why:
    what a door calls before it resumes the gate, with the same check the gate makes."""
    try:  # shape first, so a malformed decision is one clear line
        probe = Decision.model_validate(raw)
    except ValidationError as exc:
        raise UserError(first_error(exc)) from None
    if identity is not None and probe.by != identity.name:
        raise UserError(f"the decision names {probe.by!r}, but {identity.name!r} made it")
    decided = probe.model_copy(
        update={
            "verified": identity.verified if identity else False,
            "door": identity.door if identity else "langgraph",
            "at": probe.at or not_before(now(), request.drafted_at),
        }
    )
    found = refusal(policy, request, decided)
    if found is not None:
        raise found
    return decided


def _reached(at: str | None, moment: str) -> bool | None:
    """Whether the time `at` (None: now) is at or after `moment`, both UTC ISO times; None when either
    cannot be read as one (the callers then refuse what they check)."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(at) if at else datetime.now(UTC)
        return when >= datetime.fromisoformat(moment)
    except (TypeError, ValueError):
        return None


def not_before(at: str, drafted_at: str | None) -> str:
    """The time a decision records, `at` by this host's clock, but never before its draft's
    `drafted_at`: a host whose clock is behind the one that drafted would date the decision first."""
    from datetime import datetime

    try:
        later = drafted_at is not None and datetime.fromisoformat(drafted_at) > datetime.fromisoformat(at)
    except (TypeError, ValueError):  # a time this release did not write: the clock's, as it is
        return at
    return drafted_at if later and drafted_at else at


def first_error(exc: ValidationError) -> str:
    """A validation error as one line: where, and what is wrong there."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "decision"
    return f"{where}: {str(first['msg']).removeprefix('Value error, ')}"
