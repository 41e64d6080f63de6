"""The decision model: what the approval gate asks, what a decision must say, and the one rule that
says whether it may be made.

The gate (`nodes/human_review.py`) sends a `DecisionRequest` with LangGraph's `interrupt()`; a
decision comes back as the resume value and is validated as a `Decision` before anything changes.
Every door (the CLI, the web inbox, the API, LangGraph's own server) goes through `refusal`, so a
decision is bound to the draft it was made on, made by someone entitled to it, and counted once.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from market_analyst.errors import UserError
from market_analyst.state import HORIZONS, RISK_TOLERANCES, USER_ID_PATTERN

Action = Literal["approve", "reject", "revise"]
Door = Literal["cli", "web", "api", "langgraph"]
Role = Literal["approver", "reviewer"]
ROLES: tuple[str, ...] = ("approver", "reviewer")
# What each role may do: a reviewer revises (and comments with the feedback); an approver decides.
ROLE_ACTIONS: dict[str, frozenset[str]] = {
    "approver": frozenset({"approve", "reject", "revise"}),
    "reviewer": frozenset({"revise"}),
}
ACTIONS: tuple[str, ...] = ("approve", "reject", "revise")
MAX_NOTE_CHARS = 2000


def content_hash(markdown: str) -> str:
    """The SHA-256 of a draft's rendered Markdown: what the approver read, byte for byte."""
    return hashlib.sha256(markdown.encode()).hexdigest()


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
    """What the gate asks a person: the interrupt's payload, read by every door."""

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


class Decision(BaseModel):
    """A decision on one draft, the gate's resume value. `note` is the approval note, the rejection
    reason or the revise feedback. `at` is set by the application that records it (the gate fills it
    in where a client sent none); `verified` and `door` say how the decider was identified, and only
    the application's own doors may claim a verified identity (see `checking`)."""

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

    @model_validator(mode="after")
    def _allowed(self) -> Decision:
        check = _CHECK.get()
        if check is not None:
            check(self)
        return self


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


def refusal(policy: DecisionPolicy, request: DecisionRequest, decision: Decision) -> DecisionRefused | None:
    """Why `decision` may not be made on the draft `request` asks about, or None: the one rule of
    every door. Checked in this order: the draft, the allow-list, the role, separation of duties,
    and a second approval by the same person."""
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
        return DecisionRefused(
            409,
            f"{which} is not the current draft of thread {request.thread_id}: revision {request.revision} "
            f"(draft {request.draft_id}) is; read it with 'market-analyst status {request.thread_id}' "
            "and decide on it again",
        )
    if policy.allowed and decision.by not in policy.allowed:
        return DecisionRefused(
            403,
            f"{decision.by!r} may not {decision.action}: MA_APPROVERS allows "
            f"{', '.join(sorted(policy.allowed))}",
        )
    role = policy.role_of(decision.by)
    if role is not None and decision.action not in ROLE_ACTIONS.get(role, frozenset()):
        return DecisionRefused(
            403, f"{decision.by!r} is a {role} and may not {decision.action}: a reviewer may only revise"
        )
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


_CHECK: ContextVar[Callable[[Decision], None] | None] = ContextVar("decision_check", default=None)


@contextlib.contextmanager
def checking(
    policy: DecisionPolicy, request: DecisionRequest, identity: Identity | None, now: Callable[[], str]
) -> Iterator[None]:
    """Validate every `Decision` made in this block against the rule, for `request`.

    With an `identity` (the application's own door) the decision must be made in that name, and
    takes its `verified` and `door` from it; without one (a client of LangGraph's server) the
    decision is recorded as unverified, through the `langgraph` door, whatever it claims. A refusal
    is raised as the validation error it becomes inside `interrupt()`, which then saves nothing."""

    def check(decision: Decision) -> None:
        if identity is not None:
            if decision.by != identity.name:
                raise ValueError(f"the decision names {decision.by!r}, but {identity.name!r} made it")
            decision.verified, decision.door = identity.verified, identity.door
        else:
            decision.verified, decision.door = False, "langgraph"
        if decision.at is None:
            decision.at = now()
        found = refusal(policy, request, decision)
        if found is not None:
            raise ValueError(str(found))

    token = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(token)


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
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "decision"
        raise UserError(f"{where}: {str(first['msg']).removeprefix('Value error, ')}") from None
    if identity is not None and probe.by != identity.name:
        raise UserError(f"the decision names {probe.by!r}, but {identity.name!r} made it")
    decided = probe.model_copy(
        update={
            "verified": identity.verified if identity else False,
            "door": identity.door if identity else "langgraph",
            "at": probe.at or now(),
        }
    )
    found = refusal(policy, request, decided)
    if found is not None:
        raise found
    return decided
