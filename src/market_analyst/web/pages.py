"""The server-rendered pages: sign-in, the inbox, a thread's draft with its decisions, the archive.

Plain forms, no script. Each POST form carries the session's CSRF token; a decision is made in the
name of the signed-in approver, which no form field can change. After a decision the browser is
sent on with a redirect (303), so reloading a page never repeats one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from market_analyst.decisions import Action
from market_analyst.web import actions
from market_analyst.web.actions import Refusal
from market_analyst.web.chart import chart_svg, chart_title
from market_analyst.web.context import web
from market_analyst.web.render import (
    age,
    chart_cache_dir,
    feedback_history,
    render,
    report_context,
    revision_diff,
)
from market_analyst.web.security import (
    NotForTheInbox,
    Session,
    TooManyFailures,
    WrongToken,
    client_address,
    csrf_matches,
    refused_because,
    signed_in,
)

router = APIRouter(include_in_schema=False)

NOTICES = {
    "approved": "Your approval was recorded; the draft is published once enough approvers approve it.",
    "revised": "A new draft was made from your feedback; it waits for a decision again.",
    "rejected": "Rejected: nothing was published.",
}


class SignInRequired(Exception):
    """The page needs a signed-in approver (GET: redirect to /login; POST: 401)."""


@dataclass(frozen=True)
class Visitor:
    """A signed-in approver and their session."""

    session: Session
    name: str


def page(
    request: Request, template: str, session: Session | None, status: int = 200, **context: Any
) -> Response:
    """A rendered template; `session` supplies the CSRF token its forms carry."""
    name = signed_in(session)
    html = render(
        template, approver=name, csrf=session.csrf if session else "", max_text=actions.MAX_TEXT, **context
    )
    return HTMLResponse(html, status_code=status)


def visitor(request: Request) -> Visitor:
    """The signed-in approver, or `SignInRequired`."""
    session = web(request).sessions.read(request)
    name = signed_in(session)
    if session is None or name is None:
        refused_because(request, "not signed in")
        raise SignInRequired
    return Visitor(session, name)


def poster(request: Request, csrf_token: Annotated[str, Form()] = "") -> Visitor:
    """The signed-in approver of a POST form whose CSRF token is the session's; else 401 or 403."""
    who = visitor(request)
    if not csrf_token.isascii():  # no token this server issues looks like that: a malformed credential
        refused_because(request, "CSRF token not ASCII")
        raise Refusal(401, "the form's CSRF token is not one this server issued; sign in again")
    if not csrf_matches(who.session, csrf_token):
        refused_because(request, "CSRF token missing or wrong")
        raise Refusal(403, "the form's CSRF token is missing or wrong; reload the page and try again")
    return who


Signed = Annotated[Visitor, Depends(visitor)]
Posted = Annotated[Visitor, Depends(poster)]


# -- signing in and out ------------------------------------------------------------------------------


@router.get("/")
def home() -> Response:
    return RedirectResponse("/inbox", status_code=303)


@router.get("/login")
def login_form(request: Request) -> Response:
    context = web(request)
    session = context.sessions.read(request)
    if signed_in(session):
        return RedirectResponse("/inbox", status_code=303)
    session = session or context.sessions.fresh()
    response = page(request, "login.html", session)
    context.sessions.write(response, request, session)
    return response


@router.post("/login")
def login(
    request: Request, token: Annotated[str, Form()] = "", csrf_token: Annotated[str, Form()] = ""
) -> Response:
    context = web(request)
    session = context.sessions.read(request)
    if not csrf_token.isascii():  # no token this server issues looks like that: a malformed credential
        refused_because(request, "CSRF token not ASCII")
        raise Refusal(401, "the sign-in form's CSRF token is not one this server issued; reload the page")
    if not csrf_matches(session, csrf_token):
        refused_because(request, "CSRF token missing or wrong")
        raise Refusal(403, "the sign-in form's CSRF token is missing or wrong; reload the page and try again")
    try:
        approver = context.gate.authenticate(token.strip(), client_address(request))
    except TooManyFailures as exc:
        refused_because(request, "sign-in limit")
        response = page(request, "login.html", session, status=429, error=str(exc))
        response.headers["Retry-After"] = str(exc.retry_after)
        return response
    except NotForTheInbox as exc:
        refused_because(request, exc.why)
        error = "The inbox is for reviewers and approvers; that token is a requester's or an operator's."
        return page(request, "login.html", session, status=403, error=error)
    except WrongToken as exc:
        refused_because(request, exc.why)
        return page(request, "login.html", session, status=401, error="That token is not valid.")
    response = RedirectResponse("/inbox", status_code=303)
    context.sessions.write(response, request, context.sessions.start(approver, client_address(request)))
    return response


@router.post("/logout")
def logout(request: Request, who: Posted) -> Response:
    """Sign out: the session ends in the store, so a copy of its cookie no longer works anywhere."""
    context = web(request)
    context.sessions.end(who.session)
    response = RedirectResponse("/login", status_code=303)
    context.sessions.clear(response, request)
    return response


# -- the inbox and a thread ----------------------------------------------------------------------------


@router.get("/inbox")
def inbox(request: Request, who: Signed) -> Response:
    settings = web(request).settings
    now = settings.now()
    rows = [dict(row.__dict__, age=age(row.drafted_at, now)) for row in actions.pending(settings)]
    return page(request, "inbox.html", who.session, rows=rows)


def linked_draft_notice(
    linked: str, draft: dict[str, Any] | None, drafts: list[dict[str, Any]]
) -> str | None:
    """What the page says when it was opened from a link to a draft (`?draft=`, as notifications link)
    that is no longer the current one: which revision the link named and which is current. Nothing
    is decided by opening it."""
    if not linked or not draft or linked == draft.get("draft_id"):
        return None
    named = next((d for d in drafts if d.get("draft_id") == linked), None)
    which = (
        f"revision {named['revision']} (draft {linked})" if named else f"draft {linked}, not of this thread"
    )
    return (
        f"The link you followed names {which}, which is no longer the current draft: revision "
        f"{draft.get('revision')} (draft {draft.get('draft_id')}) replaced it and is shown below. A decision "
        "applies to the current draft only."
    )


@router.get("/threads/{thread_id}")
def thread_page(
    request: Request,
    thread_id: str,
    who: Signed,
    done: str = "",
    linked: Annotated[str, Query(alias="draft", max_length=64, pattern=r"^[A-Za-z0-9_-]*$")] = "",
) -> Response:
    settings = web(request).settings
    found = actions.details(settings, thread_id)
    draft = found.view.draft
    diff, diff_from = [], None
    if draft and len(found.drafts) > 1:
        previous = found.drafts[-2]
        diff, diff_from = revision_diff(previous["markdown"], draft["markdown"]), previous["revision"]
    return page(
        request,
        "thread.html",
        who.session,
        view=found.view,
        report=draft,
        drafted=age(found.updated_at, settings.now()),
        chart_src=f"/threads/{thread_id}/chart.svg" if draft and draft.get("chart") else None,
        feedback=feedback_history(found.drafts),
        diff=diff,
        diff_from=diff_from,
        notice=NOTICES.get(done) or linked_draft_notice(linked, draft, found.drafts),
        decision_request=found.view.request,
        may=actions.may_decide(settings, found.view, who.name),
        audit=actions.audit_trail(settings, thread_id),
    )


def _svg(request: Request, report: dict[str, Any] | None) -> Response:
    if not report or not report.get("chart"):
        raise Refusal(404, "no chart was recorded with this draft")
    svg = chart_svg(report["chart"], chart_title(report), chart_cache_dir(web(request).settings))
    return Response(svg, media_type="image/svg+xml")


@router.get("/threads/{thread_id}/chart.svg")
def thread_chart(request: Request, thread_id: str, who: Signed) -> Response:
    return _svg(request, actions.thread(web(request).settings, thread_id).draft)


# Every decision form carries the draft the approver read (its ID and content hash): a decision on a
# page left open while the thread was revised is refused (409), never applied to the newer draft. An
# empty draft ID is refused by `decide` once it knows the thread still waits (a thread already
# decided says so first, with its archive key).
DraftField = Annotated[str, Form()]


def _form_decision(
    request: Request,
    thread_id: str,
    who: Visitor,
    action: Action,
    text: str,
    draft_id: str,
    content_hash: str,
) -> actions.ThreadView:
    return actions.decide_as(
        web(request).settings,
        thread_id,
        action,
        approver=who.name,
        text=text,
        draft_id=draft_id,
        content_hash=content_hash or None,
        door="web",
    )


@router.post("/threads/{thread_id}/approve")
def approve(
    request: Request,
    thread_id: str,
    who: Posted,
    draft_id: DraftField = "",
    content_hash: DraftField = "",
    note: Annotated[str, Form()] = "",
) -> Response:
    view = _form_decision(request, thread_id, who, "approve", note, draft_id, content_hash)
    if view.status != "published":  # counted; the quorum is not met yet
        return RedirectResponse(f"/threads/{thread_id}?done=approved", status_code=303)
    return RedirectResponse(f"/reports/{(view.publication or {}).get('key')}", status_code=303)


@router.post("/threads/{thread_id}/reject")
def reject(
    request: Request,
    thread_id: str,
    who: Posted,
    draft_id: DraftField = "",
    content_hash: DraftField = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    _form_decision(request, thread_id, who, "reject", reason, draft_id, content_hash)
    return RedirectResponse(f"/threads/{thread_id}?done=rejected", status_code=303)


@router.post("/threads/{thread_id}/revise")
def revise(
    request: Request,
    thread_id: str,
    who: Posted,
    draft_id: DraftField = "",
    content_hash: DraftField = "",
    feedback: Annotated[str, Form()] = "",
) -> Response:
    _form_decision(request, thread_id, who, "revise", feedback, draft_id, content_hash)
    return RedirectResponse(f"/threads/{thread_id}?done=revised", status_code=303)


# -- the archive ---------------------------------------------------------------------------------------


@router.get("/reports")
def reports(request: Request, who: Signed, q: str = "", ticker: str = "", user: str = "") -> Response:
    listing = actions.reports(
        web(request).settings,
        ticker=ticker.strip().upper() or None,
        user=user.strip() or None,
        text=q.strip() or None,
    )
    return page(
        request,
        "reports.html",
        who.session,
        reports=listing.reports,
        problems=listing.problems,
        q=q,
        ticker=ticker,
        user=user,
    )


@router.get("/reports/{key}")
def report_page(request: Request, key: str, who: Signed) -> Response:
    document = actions.report(web(request).settings, key)
    chart_src = f"/reports/{key}/chart.svg" if document["report"].get("chart") else None
    return page(request, "report.html", who.session, chart_src=chart_src, **report_context(document))


@router.get("/reports/{key}/chart.svg")
def report_chart(request: Request, key: str, who: Signed) -> Response:
    return _svg(request, actions.report(web(request).settings, key)["report"])


@router.get("/docs")
def docs(request: Request) -> Response:
    session = web(request).sessions.read(request)
    return page(request, "docs.html", session, spec=request.app.openapi())
