"""The JSON API, for approvers' own tools: `Authorization: Bearer <token>` on every call but /healthz.

The same rules as the command line, as statuses: an unknown thread 404; already decided 409 with the
archive key; a thread another command is advancing 409; bad input 422 with one message; a store
that is down 503.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from market_analyst.decisions import Action
from market_analyst.web import actions
from market_analyst.web.context import web
from market_analyst.web.security import (
    NotForTheInbox,
    TooManyFailures,
    WrongToken,
    bearer_token,
    client_address,
    refused_because,
)


class Problem(BaseModel):
    """Why a request was refused, in one sentence."""

    detail: str
    archive_key: str | None = Field(None, description="The published report's key, once there is one.")


class ThreadOut(BaseModel):
    """Where a thread stands, with its current draft and any decision."""

    thread_id: str
    status: str = Field(description="awaiting_approval, approved_pending_publish, published, rejected, ...")
    next: list[str]
    ticker: str | None
    user_id: str | None
    draft: dict[str, Any] | None
    approval: dict[str, Any] | None
    publication: dict[str, Any] | None
    archive_key: str | None = Field(None, description="The published report's key.")
    updated_at: str | None = Field(None, description="When the latest checkpoint was written (UTC).")
    draft_ids: list[str] = Field(default_factory=list, description="The thread's drafts, oldest first.")
    request: dict[str, Any] | None = Field(
        None, description="The gate's decision request while the thread awaits a decision."
    )
    approvals: list[dict[str, Any]] = Field(
        default_factory=list, description="Approvals of this draft so far."
    )


class DecisionIn(BaseModel):
    """Every decision names the draft it was made on: a draft that is no longer current is refused
    (409) and nothing is recorded."""

    draft_id: str = Field(min_length=1, max_length=64, description="The draft decided on (request.draft_id).")
    content_hash: str | None = Field(
        None, max_length=64, description="The SHA-256 of the draft's Markdown as read (request.content_hash)."
    )


class ApproveIn(DecisionIn):
    note: str = Field("", max_length=actions.MAX_TEXT, description="Recorded with the approval.")


class RejectIn(DecisionIn):
    reason: str = Field(max_length=actions.MAX_TEXT, description="Why the draft must not be published.")


class ReviseIn(DecisionIn):
    feedback: str = Field(max_length=actions.MAX_TEXT, description="What the next draft should address.")


class ReportListOut(BaseModel):
    reports: list[actions.ReportSummary]
    problems: list[str] = Field(description="Documents that could not be read, and why.")


class HealthOut(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(description='"ok", or what is wrong, per store.')


def approver(request: Request) -> str:
    """The approver whose bearer token this is; 401 without a valid one (the token was checked),
    429 when this token, or this address's unknown tokens, failed too often (it was not)."""
    context = web(request)
    token = bearer_token(request)
    challenge = {"WWW-Authenticate": "Bearer"}
    if token is None:
        refused_because(request, "no bearer token")
        detail = (
            "send 'Authorization: Bearer <token>' (a token comes from: market-analyst approvers add NAME)"
        )
        raise HTTPException(401, detail, headers=challenge)
    try:
        found = context.gate.authenticate(token, client_address(request))
    except TooManyFailures as exc:
        refused_because(request, "sign-in limit")
        raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from None
    except NotForTheInbox as exc:
        refused_because(request, exc.why)
        raise HTTPException(403, "the inbox is for reviewers and approvers") from None
    except WrongToken as exc:
        refused_because(request, exc.why)
        raise HTTPException(401, "the token is not valid", headers=challenge) from None
    return found.name


Approver = Annotated[str, Depends(approver)]
REFUSALS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "No token, or not a valid one"},
    413: {"model": Problem, "description": "The body is over 64 KiB"},
    429: {"model": Problem, "description": "Too many failed sign-ins; the token was not checked"},
    403: {"model": Problem, "description": "Not entitled: MA_APPROVERS, the role, or the requester's own"},
    404: {"model": Problem, "description": "No such thread or report"},
    409: {
        "model": Problem,
        "description": "Not the current draft, already decided (with the archive key), or the thread is busy",
    },
    422: {"model": Problem, "description": "Bad input, in one message"},
    503: {"model": Problem, "description": "A store is unavailable; nothing was lost"},
}
router = APIRouter(responses=REFUSALS)


def _thread_out(view: actions.ThreadView, details: actions.ThreadDetails | None = None) -> ThreadOut:
    own = ("archive_key", "updated_at", "draft_ids")
    return ThreadOut(
        **{k: v for k, v in view.to_json().items() if k in ThreadOut.model_fields and k not in own},
        archive_key=(view.publication or {}).get("key"),
        updated_at=details.updated_at if details else view.updated_at,
        draft_ids=[d["draft_id"] for d in details.drafts] if details else [],
    )


def _api_decision(
    request: Request, thread_id: str, who: str, action: Action, text: str, body: DecisionIn
) -> ThreadOut:
    view = actions.decide_as(
        web(request).settings,
        thread_id,
        action,
        approver=who,
        text=text,
        draft_id=body.draft_id,
        content_hash=body.content_hash,
        door="api",
    )
    return _thread_out(view)


@router.get("/api/threads", summary="Threads waiting for a decision, newest draft first")
def list_threads(
    request: Request, who: Approver, status: Literal["pending"] = "pending"
) -> list[actions.PendingDraft]:
    return actions.pending(web(request).settings)


@router.get("/api/threads/{thread_id}", summary="One thread: status, draft, decision, publication")
def get_thread(request: Request, thread_id: str, who: Approver) -> ThreadOut:
    details = actions.details(web(request).settings, thread_id)
    return _thread_out(details.view, details)


@router.post(
    "/api/threads/{thread_id}/approve", summary="Approve the draft as the token's approver, and publish"
)
def approve(request: Request, thread_id: str, body: ApproveIn, who: Approver) -> ThreadOut:
    """Counted once per approver; publishes when `MA_REQUIRED_APPROVALS` distinct approvers approved
    this draft. 403 when the approver is not entitled, 409 when the draft is not current."""
    return _api_decision(request, thread_id, who, "approve", body.note, body)


@router.post(
    "/api/threads/{thread_id}/reject", summary="Reject the draft with a reason; nothing is published"
)
def reject(request: Request, thread_id: str, body: RejectIn, who: Approver) -> ThreadOut:
    return _api_decision(request, thread_id, who, "reject", body.reason, body)


@router.post("/api/threads/{thread_id}/revise", summary="Send feedback and draft again")
def revise(request: Request, thread_id: str, body: ReviseIn, who: Approver) -> ThreadOut:
    return _api_decision(request, thread_id, who, "revise", body.feedback, body)


@router.get("/api/reports", summary="Published reports, oldest first, filtered by ticker, user and text")
def list_reports(
    request: Request, who: Approver, ticker: str | None = None, user: str | None = None, q: str | None = None
) -> ReportListOut:
    listing = actions.reports(web(request).settings, ticker=ticker, user=user, text=q)
    return ReportListOut(reports=listing.reports, problems=listing.problems)


@router.get("/api/reports/{key}", summary="One published report: the archived document")
def get_report(request: Request, key: str, who: Approver) -> dict[str, Any]:
    return actions.report(web(request).settings, key)


@router.get(
    "/healthz",
    summary="Whether the checkpointer, profile store, archive and records answer (no token needed)",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "A store does not answer"}},
)
def healthz(request: Request) -> JSONResponse:
    checks = actions.health(web(request).settings)
    healthy = all(result == "ok" for result in checks.values())
    body = HealthOut(status="ok" if healthy else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if healthy else 503)
