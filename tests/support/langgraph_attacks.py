"""What the attacks on LangGraph's server share: its callers (one of each role), a `langgraph dev`
server for one records backend and quorum, and the questions each attack asks of it afterwards."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import MASTER_KEY
from tests.support.langgraph_dev import DevServer, dev_server
from tests.support.services import new_database

CALLERS = {
    "ann": "requester",
    "dan": "requester",
    "rita": "reviewer",
    "bob": "approver",
    "carol": "approver",
    "olga": "operator",
}


def start_server(request: pytest.FixtureRequest, tmp: Any, postgres_server: str, quorum: int) -> Any:
    """A server on the records backend `request.param` that publishes after `quorum` approvals. Its
    callers are added through the approvers store itself: `approvers add` is the pages' own test's."""
    home = tmp.mktemp(f"langgraph-{request.param}-{quorum}")
    env = {"MA_DATA_DIR": str(home / "data"), "MA_RECORDS": request.param}
    env["MA_REQUIRED_APPROVALS"] = str(quorum)
    if request.param == "postgres":
        env["POSTGRES_URL"] = new_database(postgres_server, prefix="lga_")
        env["MA_MASTER_KEY"] = MASTER_KEY  # the data keys live in the shared records database
    return dev_server(home, env, CALLERS, made_by_cli=False)


def gate_request(server: DevServer, who: str = "ann") -> tuple[str, dict[str, Any]]:
    """A new analysis started by `who`, waiting at the gate: its thread and the gate's request."""
    client = server.client(who)
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "analyst", input={"ticker": "NVDA"})
    return thread, client.threads.get_state(thread)["interrupts"][0]["value"]


def resume_with(server: DevServer, who: str, thread: str, answer: Any) -> Any:
    return server.client(who).runs.wait(thread, "analyst", command={"resume": answer})


def still_waiting(server: DevServer, thread: str, *, draft_id: str | None = None) -> dict[str, Any]:
    """The thread waits at the gate, listed among the interrupted, with nothing published."""
    bob = server.client("bob")
    assert bob.threads.get(thread)["status"] == "interrupted"
    assert thread in [t["thread_id"] for t in bob.threads.search(status="interrupted", limit=1000)]
    state = bob.threads.get_state(thread)
    assert state["next"] == ["human_review"]
    assert not state["values"].get("publication")
    assert server.reports_of(thread) == []
    asked: dict[str, Any] = state["interrupts"][0]["value"]
    if draft_id is not None:
        assert asked["draft_id"] == draft_id
    return asked


def audit_names(server: DevServer, thread: str) -> list[tuple[str, str]]:
    return [(e["action"], e["actor"]) for e in server.audit_of(thread)]


def publishes_once(server: DevServer, thread: str, who: str = "bob") -> None:
    """The genuine approval, by an approver through the SDK, publishes exactly one report."""
    asked = server.client(who).threads.get_state(thread)["interrupts"][0]["value"]
    state = resume_with(server, who, thread, {"action": "approve", "draft_id": asked["draft_id"]})
    assert state["publication"]["created"] is True
    [document] = server.reports_of(thread)
    assert document["approved_by"] == who and document["approval_verified"] is True
    assert document["content_hash"] == asked["content_hash"]
    assert audit_names(server, thread)[-2:] == [("approved", who), ("published", who)]
