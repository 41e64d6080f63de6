"""Every call the web layer makes into the workflow, in one module, with refusals turned into HTTP
statuses. These are the functions the CLI calls, so the lease on a thread, the approval bound to its
draft and exactly-once publishing hold unchanged; each call opens its stores and closes them again,
so the server holds nothing open between requests that would lock a command out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from market_analyst.decisions import (
    ACTIONS,
    Action,
    Decision,
    DecisionRefused,
    DecisionRequest,
    Door,
    Identity,
    refusal,
)
from market_analyst.deps import decision_policy
from market_analyst.errors import RunStopped, ServiceUnavailable, ThreadBusy, UserError
from market_analyst.settings import Settings
from market_analyst.workflow.approvers import Approvers, approver_store
from market_analyst.workflow.audit import audit_entries
from market_analyst.workflow.health import check_stores
from market_analyst.workflow.inbox import (
    PendingDraft,
    ThreadDetails,
    find_thread,
    pending_drafts,
    report_by_key,
    thread_details,
)
from market_analyst.workflow.memory_outbox import Afterwards
from market_analyst.workflow.revise import revise_thread
from market_analyst.workflow.runs import decide
from market_analyst.workflow.stores import ReportListing, ReportSummary, find_reports
from market_analyst.workflow.views import ThreadView

__all__ = ["Approvers", "PendingDraft", "Refusal", "ReportSummary", "ThreadDetails", "ThreadView"]

# The longest note, reason or feedback a request may carry: a paragraph or two, not a document.
MAX_TEXT = 2000


class Refusal(Exception):
    """A request the workflow refused, with the HTTP status that says why."""

    def __init__(self, status: int, message: str, archive_key: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.archive_key = archive_key


def _read(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ServiceUnavailable as exc:
        raise Refusal(503, str(exc)) from None
    except UserError as exc:
        raise Refusal(422, str(exc)) from None


def _text(value: str, what: str) -> str:
    if len(value) > MAX_TEXT:
        raise Refusal(422, f"{what} is too long: at most {MAX_TEXT} characters (got {len(value)})")
    return value


# -- reads ------------------------------------------------------------------------------------------


def pending(settings: Settings) -> list[PendingDraft]:
    """The drafts waiting for a decision, newest first."""
    result: list[PendingDraft] = _read(lambda: pending_drafts(settings))
    return result


def thread(settings: Settings, thread_id: str) -> ThreadView:
    """Where one thread stands (without its history); 404 when no run has that ID."""
    found: ThreadView | None = _read(lambda: find_thread(settings, thread_id))
    if found is None:
        raise Refusal(404, f"unknown thread {thread_id}")
    return found


def details(settings: Settings, thread_id: str) -> ThreadDetails:
    """One thread with its drafts; 404 when no run has that ID."""
    found: ThreadDetails | None = _read(lambda: thread_details(settings, thread_id))
    if found is None:
        raise Refusal(404, f"unknown thread {thread_id}")
    return found


def reports(settings: Settings, *, ticker: str | None, user: str | None, text: str | None) -> ReportListing:
    """Published reports matching every filter given, oldest first."""
    listing: ReportListing = _read(lambda: find_reports(settings, ticker=ticker, user=user, text=text))
    return listing


def report(settings: Settings, key: str) -> dict[str, Any]:
    """One archived document; 404 when there is none under `key`."""
    document: dict[str, Any] | None = _read(lambda: report_by_key(settings, key))
    if document is None:
        raise Refusal(404, f"no report with key {key}")
    return document


def health(settings: Settings) -> dict[str, str]:
    """ "ok" or what is wrong, for each store."""
    return check_stores(settings)


def approvers(settings: Settings) -> Approvers:
    """The approvers' store, kept by the server for its lifetime (it holds no file open)."""
    return approver_store(settings)


# -- decisions --------------------------------------------------------------------------------------


# What each decision's text is called in a refusal.
_TEXT_NAMES = {"approve": "the note", "reject": "the reason", "revise": "the feedback"}


_AFTERWARDS: dict[int, Afterwards] = {}


def afterwards(settings: Settings) -> Afterwards:
    """What copies this server's decisions' memories into the store after each answer."""
    if id(settings) not in _AFTERWARDS:
        _AFTERWARDS[id(settings)] = Afterwards(settings)
    return _AFTERWARDS[id(settings)]


def decide_as(
    settings: Settings,
    thread_id: str,
    action: Action,
    *,
    approver: str,
    text: str,
    draft_id: str,
    content_hash: str | None,
    door: Door,
) -> ThreadView:
    """One decision on exactly `draft_id` by the signed-in `approver` (a verified identity): `text` is
    the approval's note, the rejection's reason or the revise feedback. An approval publishes once the
    quorum is met; a revise drafts again. 403 when the rule does not entitle the approver, 409 when
    the draft is not current."""
    text = _text(text, _TEXT_NAMES[action]).strip()
    if action == "reject" and not text:
        raise Refusal(422, "a rejection needs a reason")
    identity = Identity(approver, verified=True, door=door)
    # The answer does not wait for the memory store: what the decision leaves to remember is copied
    # into it right after, in the server's own thread (workflow/memory_outbox.py).
    later = afterwards(settings)
    try:
        with later.deciding(thread_id):
            return _decided(settings, thread_id, action, identity, text, draft_id, content_hash)
    finally:
        later.soon()


def _decided(
    settings: Settings,
    thread_id: str,
    action: Action,
    identity: Identity,
    text: str,
    draft_id: str,
    content_hash: str | None,
) -> ThreadView:
    """One decision by the signed-in `identity`, its memory left waiting for `Afterwards`."""
    if action == "revise":
        return _decide(
            settings,
            thread_id,
            lambda: revise_thread(
                settings,
                thread_id,
                feedback=text,
                identity=identity,
                draft_id=draft_id,
                content_hash=content_hash,
                memories="later",
            ),
        )
    return _decide(
        settings,
        thread_id,
        lambda: decide(
            settings,
            thread_id,
            action=action,
            identity=identity,
            note=text,
            draft_id=draft_id,
            content_hash=content_hash,
            memories="later",
        )[1],
    )


def may_decide(settings: Settings, view: ThreadView, approver: str) -> dict[str, str | None]:
    """For each action, None if `approver` may take it on the thread's current draft now, else why
    not (the same rule the decision will meet)."""
    request = view.request
    if request is None:
        return {action: "the thread is not waiting for a decision" for action in ACTIONS}
    parsed = DecisionRequest.model_validate(request)
    policy = decision_policy(settings)
    result: dict[str, str | None] = {}
    for action in ACTIONS:
        probe = Decision.model_validate(
            {
                "action": action,
                "draft_id": parsed.draft_id,
                "content_hash": parsed.content_hash,
                "by": approver,
                "verified": True,
                "door": "web",
            }
        )
        found = refusal(policy, parsed, probe)
        result[action] = str(found) if found else None
    return result


def audit_trail(settings: Settings, thread_id: str) -> list[dict[str, Any]]:
    """The thread's audit entries, oldest first (an unreadable log is one line, not a page error)."""
    entries: list[dict[str, Any]] = _read(lambda: audit_entries(settings, thread_id))
    return entries


def _decide(settings: Settings, thread_id: str, act: Callable[[], ThreadView]) -> ThreadView:
    try:
        return act()
    except ThreadBusy as exc:
        raise Refusal(409, str(exc)) from None
    except ServiceUnavailable as exc:
        raise Refusal(503, str(exc)) from None
    except RunStopped as exc:  # the run stopped on its way to the gate or to the archive
        raise Refusal(503 if isinstance(exc.cause, ServiceUnavailable) else 500, str(exc)) from None
    except DecisionRefused as exc:
        raise Refusal(exc.status, str(exc)) from None
    except UserError as exc:
        raise _refusal_after(settings, thread_id, exc) from None


def _refusal_after(settings: Settings, thread_id: str, exc: UserError) -> Refusal:
    """Why a decision was refused, from the thread as it stands now: unknown (404), decided or not at
    the gate (409, with the archive key once published), or bad input (422)."""
    try:
        view = find_thread(settings, thread_id)
    except ServiceUnavailable as again:
        return Refusal(503, str(again))
    except UserError:
        return Refusal(422, str(exc))
    if view is None:
        return Refusal(404, str(exc))
    if view.status in ("awaiting_approval", "expired"):
        return Refusal(422, str(exc))
    return Refusal(409, str(exc), (view.publication or {}).get("key"))
