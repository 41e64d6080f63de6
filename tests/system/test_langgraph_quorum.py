"""LangGraph's server with a quorum of two, played by its worst users: one approver under two names
is one approval, and text changed between two approvals keeps neither approval of the old text. On a
real `langgraph dev` from the repository's langgraph.json, with MA_RECORDS both ways."""

from __future__ import annotations

import hashlib
from functools import partial
from typing import Any

import pytest

from tests.support.langgraph_attacks import (
    audit_names,
    gate_request,
    resume_with,
    start_server,
    still_waiting,
)
from tests.support.langgraph_dev import DevServer

# One worker runs this module; the attacks' own servers start on another.
pytestmark = pytest.mark.xdist_group("langgraph-quorum")


@pytest.fixture(scope="module", params=["files", "postgres"])
def quorum_server(
    request: pytest.FixtureRequest, tmp_path_factory: Any, postgres_server: str, lasting: Any
) -> DevServer:
    return lasting(
        ("langgraph-quorum", request.param),
        partial(start_server, request, tmp_path_factory, postgres_server, 2),
    )


def test_one_approver_under_two_names_is_one_approval(quorum_server: DevServer):
    server = quorum_server
    thread, asked = gate_request(server)
    for name in ("x1", "x2"):
        resume_with(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"], "by": name})
        assert "is signed in" in still_waiting(server, thread)["refused"]
    resume_with(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    resume_with(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    again = still_waiting(server, thread)
    assert "has already approved" in again["refused"] and [a["by"] for a in again["approvals"]] == ["bob"]
    assert audit_names(server, thread) == [("approved", "bob")]
    state = resume_with(server, "carol", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    assert state["publication"]["created"] is True and len(server.reports_of(thread)) == 1
    assert server.reports_of(thread)[0]["approved_by"] == "bob, carol"


def test_text_changed_between_two_approvals_keeps_neither_approval_of_the_old_text(quorum_server: DevServer):
    server = quorum_server
    thread, asked = gate_request(server)
    resume_with(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    # The operator changes the text under the same draft ID.
    values = server.client("olga").threads.get_state(thread)["values"]
    changed = dict(values["draft"], markdown=values["draft"]["markdown"] + "\nA line nobody approved.\n")
    server.client("olga").threads.update_state(thread, {"draft": changed}, as_node="draft_report")
    server.client("olga").runs.wait(thread, "analyst", input=None)
    now = still_waiting(server, thread, draft_id=asked["draft_id"])
    digest = hashlib.sha256(changed["markdown"].encode()).hexdigest()
    assert now["content_hash"] == digest != asked["content_hash"]
    assert now["approvals"] == []  # bob approved other text
    resume_with(server, "carol", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    assert [a["by"] for a in still_waiting(server, thread)["approvals"]] == ["carol"]
    assert server.reports_of(thread) == []
    state = resume_with(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    [document] = server.reports_of(thread)
    assert state["publication"]["created"] is True and document["markdown"] == changed["markdown"]
