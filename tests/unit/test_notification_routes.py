"""Who is told of each event: the webhook of every event, and email to the approvers an event asks
something of (read from a real approvers file)."""

from __future__ import annotations

from pathlib import Path

from market_analyst.persistence.approvers.files import ApproverStore
from market_analyst.persistence.notifications.routes import Routes
from market_analyst.ports import Event


def _routes(tmp_path: Path, **kwargs: str) -> Routes:
    store = ApproverStore(tmp_path / "approvers")
    store.add("ann", "2026-01-01T00:00:00+00:00", "approver", "ann@example.test")
    store.add("dora", "2026-01-01T00:00:00+00:00", "approver", "dora@example.test")
    store.add("rev", "2026-01-01T00:00:00+00:00", "reviewer", "rev@example.test")
    store.add("ops", "2026-01-01T00:00:00+00:00", "operator", "ops@example.test")
    store.add("bob", "2026-01-01T00:00:00+00:00", "approver")  # no address
    return Routes("http://inbox.test", store, **kwargs)


def _event(kind: str, **fields: object) -> Event:
    return Event(event_id=f"evt_{kind}", kind=kind, at="2026-01-01T00:00:00+00:00", thread_id="t", **fields)  # type: ignore[arg-type]


def test_a_request_asks_every_approver_with_an_address_but_the_requester(tmp_path: Path):
    routes = _routes(tmp_path, smtp_url="smtp://127.0.0.1:25")
    assert routes.receivers(_event("requested", by="ann", requester="ann")) == ["email:dora"]
    assert routes.receivers(_event("reminded", requester="ann")) == ["email:dora"]
    assert routes.receivers(_event("counted", by="dora", requester="ann")) == []


def test_an_escalation_tells_the_names_and_roles_it_names_and_an_outcome_tells_an_approver_requester(
    tmp_path: Path,
):
    routes = _routes(tmp_path, smtp_url="smtp://127.0.0.1:25")
    assert routes.receivers(_event("escalated", to=("bob", "role:operator"), requester="ann")) == [
        "email:ops"
    ]
    assert routes.receivers(_event("published", by="dora", requester="ann")) == ["email:ann"]
    assert routes.receivers(_event("expired", requester="cy")) == []  # a requester known only by name


def test_the_webhook_gets_every_event_and_nothing_is_routed_without_a_channel(tmp_path: Path):
    hooked = _routes(tmp_path, webhook_url="http://127.0.0.1:9/h", webhook_secret="whsec_x")
    assert hooked.receivers(_event("counted")) == ["webhook"]
    assert _routes(tmp_path / "none").receivers(_event("requested", requester="ann")) == []
