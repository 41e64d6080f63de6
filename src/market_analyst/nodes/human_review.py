"""human_review: the approval gate. It asks a person for a decision with LangGraph's `interrupt()`,
and accepts only a decision the rule allows, made by the caller its door identified, on exactly the
draft it asks about; what it accepts it seals (`decisions.DecisionSeal`), and only a sealed decision
moves the thread on.

Who decided and when come from the door, never from the answer: a decision from one of the
application's own doors (the CLI, the web inbox, its API) arrives sealed by that door, and one sent
to LangGraph's server is made in the name of the server's authenticated caller
(`config["configurable"]["langgraph_auth_user"]`), at this process's clock. An answer the gate does
not take (malformed, not entitled, not on this draft, stale, unauthenticated) is asked again: the gate
leaves no decision and the reason and routes back to itself (`record_decision`, which its edge still
reaches, finds nothing to record), and interrupts with the reason, so the thread stays waiting and
listed, and nothing is recorded.

The node re-runs from its start when the run resumes, so it only asks, checks and seals: the decision
is applied (and audited) by `record_decision`, the next node.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt
from pydantic import ValidationError

from market_analyst.context import Deps
from market_analyst.deadlines import iso, schedule
from market_analyst.decisions import (
    ACTIONS,
    ApprovalSoFar,
    ClientDecision,
    Decision,
    DecisionPolicy,
    DecisionRefused,
    DecisionRequest,
    DecisionSeal,
    draft_digest,
    first_error,
    inbox_fields,
    not_before,
    refusal,
)
from market_analyst.decisions import content_hash as hash_of
from market_analyst.errors import UserError
from market_analyst.formatting import describe_age
from market_analyst.state import AnalystState

GATE = "human_review"
# How a client of LangGraph's server reads the current draft again (refusals name no CLI command there).
SERVER_REREAD = "read the thread's current interrupt"
# The answer LangGraph's server and Studio offer a form for: a decision, or Agent Inbox's HumanResponse.
RESPONSE_SCHEMA: dict[str, Any] = {
    "title": "Decision",
    "anyOf": [
        ClientDecision.model_json_schema(),
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"type": {"enum": ["accept", "response"]}, "args": {}},
                "required": ["type"],
            },
        },
    ],
}


def sealed_approvals(state: AnalystState, thread_id: str, seal: DecisionSeal) -> list[Decision]:
    """The approvals of the state's current draft (its ID, its exact text and every field beside it,
    for the same requester) that carry a valid seal for this thread, one per approver, in order: what
    counts towards the quorum. Anything else in the state's `approvals` (written there by hand,
    copied from another thread, made on another draft, or recorded before decisions were sealed)
    counts for nothing."""
    return [a for a in _sealed_of(state, thread_id, seal) if a.action == "approve"]


def unproven(decision: Decision | None, state: AnalystState) -> str | None:
    """Why a sealed `decision` (None: none valid) proves nothing about the state's current draft and
    requester, or None when it holds for them."""
    if decision is None:
        return (
            "the decision in the thread's state was not made at this gate (it carries no valid seal for "
            "this thread); decide again"
        )
    draft = state["draft"]
    if (
        decision.draft_id != draft["draft_id"]
        or decision.content_hash != hash_of(draft["markdown"])
        or decision.draft_digest != draft_digest(draft)
    ):
        return "the decision in the thread's state was made on another draft than this one; decide again"
    if decision.requester != state.get("user_id"):
        return "the decision in the thread's state was made for another requester; decide again"
    return None


def _sealed_of(state: AnalystState, thread_id: str, seal: DecisionSeal) -> list[Decision]:
    found: dict[str, Decision] = {}
    for raw in state.get("approvals") or []:
        decision = seal.sealed(thread_id, raw)
        if decision is not None and unproven(decision, state) is None:
            found.setdefault(decision.by, decision)
    return list(found.values())


def decision_request(
    state: AnalystState,
    thread_id: str,
    policy: DecisionPolicy,
    seal: DecisionSeal | None = None,
    refused: str | None = None,
) -> DecisionRequest:
    """What the gate asks about the state's draft: the same request in every process that reads it.
    With a `seal`, the approvals listed are the sealed ones of this exact text (those that count)."""
    draft = state["draft"]
    digest = hash_of(draft["markdown"])
    if seal is not None:
        approvals = [
            ApprovalSoFar(by=a.by, at=a.at or "", verified=a.verified, door=a.door)
            for a in sealed_approvals(state, thread_id, seal)
        ]
    else:  # a thread paused by an earlier version's static gate, described before it enters this one
        approvals = [
            ApprovalSoFar.model_validate({k: a[k] for k in ("by", "at", "verified", "door")})
            for a in state.get("approvals") or []
            if a.get("draft_id") == draft["draft_id"]
        ]
    return DecisionRequest(
        thread_id=thread_id,
        ticker=draft["ticker"],
        draft_id=draft["draft_id"],
        revision=int(draft["revision"]),
        content_hash=digest,
        headline=draft["headline"],
        requested_by=state.get("user_id"),
        allowed_actions=list(ACTIONS),
        approvals=approvals,
        approvals_needed=policy.required_approvals,
        drafted_at=state.get("drafted_at"),
        **_due_times(state, policy),
        refused=refused,
        **inbox_fields(draft["draft_id"], digest, draft["headline"], draft["markdown"]),
    )


def _due_times(state: AnalystState, policy: DecisionPolicy) -> dict[str, Any]:
    """When the draft's decision is due and when it expires, counted from its request; and when its
    expiry was recorded, if it was (a draft made before drafts were dated has no due times)."""
    drafted_at = state.get("drafted_at")
    expired = state.get("expired") or {}
    expired_at = expired.get("at") if expired.get("draft_id") == state["draft"]["draft_id"] else None
    if not drafted_at:
        return {"expired_at": expired_at}
    try:
        made = datetime.fromisoformat(drafted_at)
    except ValueError:
        return {"expired_at": expired_at}
    times = schedule(made, policy.deadlines)
    return {"due_at": iso(times.due_at), "expires_at": iso(times.expires_at), "expired_at": expired_at}


def server_caller(config: RunnableConfig) -> str | None:
    """The caller LangGraph's server authenticated for this run (its auth handler's identity), or None
    when the run has none (no server, or a server without auth)."""
    user = (config.get("configurable") or {}).get("langgraph_auth_user")
    if user is None:
        return None
    identity = user.get("identity") if isinstance(user, Mapping) else getattr(user, "identity", None)
    return identity if isinstance(identity, str) and identity else None


def _client_answer(raw: Any, request: DecisionRequest) -> ClientDecision:
    """A client's answer as a decision: the project's own shape, or Agent Inbox's `HumanResponse`
    list (`accept` approves the draft shown, `response` revises with its text)."""
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], Mapping) and "type" in raw[0]:
        raw = raw[0]
    if isinstance(raw, Mapping) and "type" in raw and "action" not in raw:
        kind, args = raw.get("type"), raw.get("args")
        if kind == "accept":
            shown = (args.get("args") if isinstance(args, Mapping) else None) or {}
            return ClientDecision(
                action="approve",
                draft_id=str(shown.get("draft_id") or request.draft_id),
                content_hash=str(shown.get("content_hash") or request.content_hash),
                note="",
            )
        if kind == "response":
            if not isinstance(args, str) or not args.strip():
                raise UserError("a response needs its text: the feedback the analyst revises the draft with")
            return ClientDecision(
                action="revise", draft_id=request.draft_id, content_hash=request.content_hash, note=args
            )
        raise UserError(
            f"this gate does not take {kind!r}: 'accept' approves the draft, 'response' revises it with "
            "your feedback; to reject it, answer with an action 'reject' and a reason"
        )
    if not isinstance(raw, Mapping):
        raise UserError("the answer is not a decision: send an object with action and draft_id")
    if "seal" in raw:
        raise DecisionRefused(403, "the decision's seal is not valid for this thread: decide again")
    try:
        return ClientDecision.model_validate(dict(raw))
    except ValidationError as exc:
        raise UserError(first_error(exc)) from None


def accepted(
    raw: Any, state: AnalystState, request: DecisionRequest, deps: Deps, config: RunnableConfig
) -> Decision:
    """The sealed decision the gate takes from the answer `raw`, or the refusal that says why not."""
    thread_id = request.thread_id
    now = deps.now()
    decision = deps.seal.for_doors().sealed(thread_id, raw)
    reread = None
    if decision is None:  # not from one of the application's doors: LangGraph's server's caller
        caller = server_caller(config)
        answer = _client_answer(raw, request)
        if caller is None:
            raise DecisionRefused(
                401,
                "no authenticated caller: a decision through LangGraph's server needs a token "
                "(Authorization: Bearer ..., from 'market-analyst approvers add')",
            )
        if answer.by is not None and answer.by != caller:
            raise DecisionRefused(403, f"the decision names {answer.by!r}, but {caller!r} is signed in")
        try:
            decision = Decision(
                action=answer.action,
                draft_id=answer.draft_id,
                content_hash=answer.content_hash,
                by=caller,
                note=answer.note,
                options=answer.options,
                at=not_before(now.isoformat(timespec="seconds"), state.get("drafted_at")),
                verified=True,
                door="langgraph",
            )
        except ValidationError as exc:
            raise UserError(first_error(exc)) from None
        reread = SERVER_REREAD
    found = refusal(deps.policy, request, decision, reread=reread)
    if found is not None:
        raise found
    if decision.action == "reject" and not decision.note:
        raise DecisionRefused(422, "a rejection needs a reason: say in the note why it should not publish")
    if decision.action == "approve" and reread is not None:  # a door of the application checked its own
        _refuse_stale(deps.policy, state.get("drafted_at"), now)
    bound = decision.model_copy(
        update={
            "content_hash": request.content_hash,
            "draft_digest": draft_digest(state["draft"]),
            "requester": state.get("user_id"),
            "seal": None,
        }
    )
    return deps.seal.seal(thread_id, bound)


def _refuse_stale(policy: DecisionPolicy, drafted_at: str | None, now: datetime) -> None:
    """An answer sent to LangGraph's server approves no draft older than `MA_MAX_DRAFT_AGE`."""
    if policy.max_draft_age is None:
        return
    again = "revise it, or approve it at the command line with --allow-stale"
    if not drafted_at:
        raise DecisionRefused(
            409, f"the draft's age is not recorded, so it cannot be checked against MA_MAX_DRAFT_AGE: {again}"
        )
    made = datetime.fromisoformat(drafted_at)
    age = (now - made).total_seconds() if made.tzinfo else None
    if age is not None and age > policy.max_draft_age:
        raise DecisionRefused(
            409,
            f"the draft was made {describe_age(age)} ago, longer than MA_MAX_DRAFT_AGE "
            f"({describe_age(policy.max_draft_age)}) allows: {again}",
        )


def human_review(state: AnalystState, config: RunnableConfig, runtime: Runtime[Deps]) -> Any:
    """Interrupt with the decision request; on resume, the sealed decision, or none, the reason the
    answer was not taken, and the question again."""
    deps = runtime.context
    thread_id = str(config["configurable"]["thread_id"])
    request = decision_request(state, thread_id, deps.policy, deps.seal, refused=state.get("refused"))
    raw = interrupt(request.model_dump(mode="json"), response_schema=RESPONSE_SCHEMA)
    try:
        decision = accepted(raw, state, request, deps, config)
    except (UserError, ValidationError) as exc:  # asked again; `record_decision` finds nothing to record
        why = first_error(exc) if isinstance(exc, ValidationError) else str(exc)
        return Command(goto=GATE, update={"decision": None, "refused": why})
    return {"decision": decision.model_dump(mode="json"), "refused": None}
