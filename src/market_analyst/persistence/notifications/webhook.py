"""A webhook delivery, signed per the Standard Webhooks spec: the `webhook-id` (the event's ID, the
same on every attempt, so a receiver de-duplicates by it), `webhook-timestamp` and
`webhook-signature` headers, made by the `standardwebhooks` package."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
from standardwebhooks.webhooks import Webhook

from market_analyst.ports import Event
from market_analyst.redaction import redact_url

TIMEOUT_SECONDS = 10.0


class DeliveryFailed(Exception):
    """The receiver did not take the event (an answer other than 2xx, or none): tried again later."""


def payload(event: Event, public_url: str) -> dict[str, Any]:
    """What a receiver is sent: the thread, ticker, draft and its hash, the action, who and when, and
    a link to the draft's page in the inbox; never a note, a profile or a memory."""
    return {
        "type": f"approval.{event.kind}",
        "timestamp": event.at,
        "data": {
            "event_id": event.event_id,
            "action": event.kind,
            "thread_id": event.thread_id,
            "ticker": event.ticker,
            "draft_id": event.draft_id,
            "content_hash": event.content_hash,
            "revision": event.revision,
            "by": event.by,
            "requester": event.requester,
            "verified": event.verified,
            "door": event.door,
            "at": event.at,
            "approvals": event.approvals,
            "to": list(event.to),
            "due_at": event.due_at,
            "expires_at": event.expires_at,
            "link": f"{public_url}/threads/{event.thread_id}"
            + (f"?draft={event.draft_id}" if event.draft_id else ""),
        },
    }


def send(url: str, secret: str, event: Event, public_url: str, now: datetime | None = None) -> None:
    """POST the event to `url`, signed with `secret`; `DeliveryFailed` unless the answer is 2xx."""
    body = json.dumps(payload(event, public_url), separators=(",", ":"), sort_keys=True)
    sent_at = now or datetime.now(UTC)
    headers = {
        "content-type": "application/json",
        "user-agent": "market-analyst-webhooks",
        "webhook-id": event.event_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": Webhook(secret).sign(event.event_id, sent_at, body),
    }
    try:
        answer = httpx.post(url, content=body.encode(), headers=headers, timeout=TIMEOUT_SECONDS)
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
        raise DeliveryFailed(f"{redact_url(url)} did not answer: {type(exc).__name__}: {exc}"[:300]) from None
    if not 200 <= answer.status_code < 300:
        raise DeliveryFailed(f"{redact_url(url)} answered {answer.status_code}")
