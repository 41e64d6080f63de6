"""Who is told of each event, and how: the webhook (`MA_WEBHOOK_URL`) gets every event; approvers
with an address get email (`MA_SMTP_URL`) of what asks something of them.

- a request and its reminders: every approver (role `approver`) with an address, but the requester;
- an escalation: the approvers it names (`MA_ESCALATE_TO`: names, or `role:ROLE` for everyone holding
  a role) who have an address;
- a publication, a rejection, a revise sent back, an expiry: the requester, when they are an approver
  with an address (a requester known only by name has none).

An approval counted short of the quorum is told by webhook only. Receivers are chosen when the event
is relayed; an address is looked up again when the mail is sent, so a changed one is used and a
removed one fails (and is dead-lettered after the attempts)."""

from __future__ import annotations

import time
from typing import Any

from market_analyst.persistence.notifications import email, webhook
from market_analyst.persistence.notifications.webhook import DeliveryFailed
from market_analyst.ports import Approvers, Event

ASKING = ("requested", "reminded")
TO_REQUESTER = ("published", "rejected", "revised", "expired")


class Routes:
    def __init__(
        self,
        public_url: str,
        approvers: Approvers,
        *,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        smtp_url: str | None = None,
        mail_from: str = "market-analyst@localhost",
    ) -> None:
        self.public_url, self.approvers = public_url, approvers
        self.webhook_url, self.webhook_secret = webhook_url, webhook_secret
        self.smtp_url, self.mail_from = smtp_url, mail_from
        self._people: tuple[float, dict[str, Any]] | None = None

    def _with_address(self) -> dict[str, Any]:
        """The approvers with an address, read at most once a second (a relay pass asks per event)."""
        now = time.monotonic()
        if self._people is None or now - self._people[0] > 1.0:
            self._people = (now, {a.name: a for a in self.approvers.list() if a.email})
        return self._people[1]

    def receivers(self, event: Event) -> list[str]:
        names = ["webhook"] if self.webhook_url and self.webhook_secret else []
        if self.smtp_url:
            people = self._with_address()
            if event.kind in ASKING:
                chosen = [n for n, a in people.items() if a.role == "approver" and n != event.requester]
            elif event.kind == "escalated":  # names, and `role:ROLE` for every approver holding it
                roles = {t.removeprefix("role:") for t in event.to if t.startswith("role:")}
                chosen = [n for n, a in people.items() if n in event.to or a.role in roles]
            elif event.kind in TO_REQUESTER and event.requester in people:
                chosen = [str(event.requester)]
            else:
                chosen = []
            names += [f"email:{n}" for n in sorted(chosen)]
        return names

    def send(self, receiver: str, event: Event) -> None:
        if receiver == "webhook" and self.webhook_url and self.webhook_secret:
            webhook.send(self.webhook_url, self.webhook_secret, event, self.public_url)
            return
        if receiver.startswith("email:") and self.smtp_url:
            name = receiver.removeprefix("email:")
            address = next((a.email for a in self.approvers.list() if a.name == name and a.email), None)
            if address is None:
                raise DeliveryFailed(f"approver {name!r} has no email address any more")
            email.send(
                self.smtp_url, email.message(event, self.mail_from, address, receiver, self.public_url)
            )
            return
        raise DeliveryFailed(f"no receiver {receiver!r} is configured any more")
