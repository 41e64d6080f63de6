"""Notifications by email, over SMTP (`MA_SMTP_URL`), to approvers who have an address.

The message names the draft and links to its page in the inbox (`MA_PUBLIC_URL`). The link decides
nothing: mail scanners follow links, so the page asks for a sign-in, shows the draft the link names
and, when that draft has since been revised, says which revision is current. Its `Message-ID` is
derived from the event and the receiver, so a copy sent twice (a worker killed after the server took
it) carries the same ID."""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage
from urllib.parse import unquote, urlsplit

from market_analyst.persistence.notifications.webhook import DeliveryFailed, payload
from market_analyst.ports import Event
from market_analyst.redaction import redact_url

TIMEOUT_SECONDS = 10.0
SUBJECTS = {
    "requested": "decision requested",
    "counted": "approval counted",
    "reminded": "reminder: a decision is waiting",
    "escalated": "escalated: a decision is past its due time",
    "expired": "expired: the draft can no longer be approved",
    "published": "published",
    "rejected": "rejected",
    "revised": "sent back for revision",
}


def message(event: Event, sender: str, to: str, receiver: str, public_url: str) -> EmailMessage:
    """The email of one event to one approver: what happened, to which draft, and its page."""
    data = payload(event, public_url)["data"]
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = to
    mail["Subject"] = f"{event.ticker or 'Thread'}: {SUBJECTS[event.kind]} (revision {event.revision})"
    mail["Message-ID"] = f"<{event.event_id}.{receiver.replace(':', '-')}@market-analyst>"
    lines = [
        f"Thread {event.thread_id} on {event.ticker}: {SUBJECTS[event.kind]}.",
        f"Draft {event.draft_id}, revision {event.revision}, content hash {event.content_hash}.",
    ]
    if event.by:
        lines.append(
            f"By: {event.by} ({'verified' if event.verified else 'unverified'}, {event.door or '-'})."
        )
    if event.approvals:
        lines.append(f"Approvals: {event.approvals}.")
    if event.due_at:
        lines.append(f"Due by {event.due_at}.")
    if event.expires_at and event.kind != "expired":
        lines.append(f"Expires at {event.expires_at}.")
    lines += [
        "",
        f"Open it: {data['link']}",
        "Opening the link decides nothing: the page asks you to sign in, shows this draft, and says so "
        "if a newer revision has replaced it.",
    ]
    mail.set_content("\n".join(lines) + "\n")
    return mail


def send(smtp_url: str, mail: EmailMessage) -> None:
    """Hand `mail` to the SMTP server `smtp_url` (smtp://, smtp+starttls:// or smtps://, with an
    optional user:password); `DeliveryFailed` unless it took it."""
    try:
        parts = urlsplit(smtp_url)
        host, scheme, port = parts.hostname or "localhost", parts.scheme.lower(), parts.port
    except ValueError:  # its text may hold the password: not repeated
        raise DeliveryFailed(f"{redact_url(smtp_url)} is not an SMTP URL") from None
    try:
        if scheme == "smtps":
            client: smtplib.SMTP = smtplib.SMTP_SSL(
                host, port or 465, timeout=TIMEOUT_SECONDS, context=ssl.create_default_context()
            )
        else:
            client = smtplib.SMTP(host, port or 25, timeout=TIMEOUT_SECONDS)
        with client:
            if scheme == "smtp+starttls":
                client.starttls(context=ssl.create_default_context())
            if parts.username:
                client.login(unquote(parts.username), unquote(parts.password or ""))
            client.send_message(mail)
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryFailed(
            f"{redact_url(smtp_url)} did not take the mail: {type(exc).__name__}: {exc}"[:300]
        ) from None
