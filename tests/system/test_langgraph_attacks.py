"""LangGraph's server played by its worst users, with nothing but the SDK and a token each from
`approvers add`: a state writer, a router past the gate, a typed name, one approver under two names,
text changed between two approvals, a fork and a copy of a published thread, a client's own `at`;
and requesters reaching for others' threads, the assistant and the store. Each attack publishes
nothing and leaves no audit entry naming anyone but an authenticated caller who really decided; the
genuine approval then publishes once. Agent Inbox's answers work where they should. On a real
`langgraph dev` from the repository's langgraph.json, with MA_RECORDS both ways."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from langgraph_sdk.client import SyncLangGraphClient

from tests.support.langgraph_attacks import (
    audit_names,
    gate_request,
    publishes_once,
    resume_with,
    start_server,
    still_waiting,
)
from tests.support.langgraph_dev import DevServer, status_of

# One worker runs this module (`make test` distributes by group), so each `langgraph dev` server
# below starts once rather than once on every worker that draws one of its tests. The quorum's
# servers are test_langgraph_quorum.py's, so the two modules' servers start on two workers.
pytestmark = pytest.mark.xdist_group("langgraph-attacks")


@pytest.fixture(scope="module", params=["files", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: Any, postgres_server: str, lasting: Any
) -> DevServer:
    return lasting(
        ("langgraph-attacks", request.param),
        partial(start_server, request, tmp_path_factory, postgres_server, 1),
    )


def _forged(asked: dict[str, Any]) -> dict[str, Any]:
    return {
        "action": "approve",
        "draft_id": asked["draft_id"],
        "content_hash": asked["content_hash"],
        "by": "ceo",
        "verified": True,
        "door": "web",
        "at": "2020-01-01T00:00:00+00:00",
    }


def test_a_forged_decision_written_into_the_state_publishes_nothing(server: DevServer):
    thread, asked = gate_request(server)
    state = server.client("olga").threads.get_state(thread)["values"]
    rewritten = dict(state["draft"], markdown=state["draft"]["markdown"] + "\nBUY EVERYTHING.\n")
    values = {"decision": _forged(asked), "draft": rewritten}
    # A requester and an approver may not write state at all; an operator may, and it proves nothing.
    for who in ("ann", "bob"):
        write = server.client(who).threads.update_state
        assert status_of(lambda w=write: w(thread, values, as_node="human_review")) == 403
    # On the text as it is, and on rewritten text: neither is recorded, the gate asks again.
    for written in ({"decision": _forged(asked)}, values):
        server.client("olga").threads.update_state(thread, written, as_node="human_review")
        server.client("olga").runs.wait(thread, "analyst", input=None)
        assert server.reports_of(thread) == [] and audit_names(server, thread) == []
        asked_again = still_waiting(server, thread)
        assert "decide again" in asked_again["refused"]
    # The operator's approvals list, sealed by nobody, counts for nothing either.
    claimed = {"approvals": [_forged(asked_again) | {"seal": "0" * 64}]}
    server.client("olga").threads.update_state(thread, claimed, as_node="record_decision")
    server.client("olga").runs.wait(thread, "analyst", input=None)
    assert server.reports_of(thread) == [] and audit_names(server, thread) == []


def test_command_goto_publish_publishes_nothing_and_the_genuine_approvalpublishes_once(server: DevServer):
    thread, asked = gate_request(server)
    approval = {"decision": "approved", "by": "ceo", "at": "2020-01-01", "draft_id": asked["draft_id"]}
    command = {"goto": "publish", "update": {"approval": approval}}
    for who in ("ann", "bob", "rita"):
        assert status_of(lambda w=who: server.client(w).runs.wait(thread, "analyst", command=command)) == 403
    server.client("olga").runs.wait(thread, "analyst", command={"goto": "publish"})
    still_waiting(server, thread, draft_id=asked["draft_id"])
    server.client("olga").runs.wait(thread, "analyst", command=command)
    still_waiting(server, thread, draft_id=asked["draft_id"])
    assert audit_names(server, thread) == []
    publishes_once(server, thread)


def test_typed_names_decide_nothing(server: DevServer):
    thread, asked = gate_request(server)
    for who, answer, why in (
        ("ann", {"by": "bob"}, "but 'ann' is signed in"),  # the requester, as an approver's name
        ("ann", {}, "requester"),  # the requester, as herself
        ("rita", {"by": "bob"}, "but 'rita' is signed in"),  # a reviewer, as an approver's name
        ("rita", {}, "a reviewer may only revise"),
        ("olga", {}, "an operator repairs threads and decides none"),
        ("bob", {"at": "1999-01-01T00:00:00+00:00"}, "at"),  # back-dated
        ("bob", {"at": "not-a-date"}, "at"),  # malformed
        ("bob", {"verified": True, "door": "web"}, "verified"),
    ):
        resume_with(server, who, thread, {"action": "approve", "draft_id": asked["draft_id"]} | answer)
        refused = still_waiting(server, thread, draft_id=asked["draft_id"])["refused"]
        assert why in refused, (who, answer, refused)
        assert audit_names(server, thread) == []
    publishes_once(server, thread)
    [entry, _] = server.audit_of(thread)
    assert entry["at"] >= asked["drafted_at"]


def test_an_approver_who_asked_for_the_analysis_may_not_approve_it(server: DevServer):
    thread, asked = gate_request(server, "carol")
    assert asked["requested_by"] == "carol"
    resume_with(server, "carol", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    assert "separation of duties" in still_waiting(server, thread)["refused"]
    publishes_once(server, thread)


def test_a_fork_or_a_copy_of_a_published_thread_publishes_nothing_more(server: DevServer):
    thread, asked = gate_request(server)
    publishes_once(server, thread)
    olga = server.client("olga")
    # Fork at the checkpoint that was about to publish, with a new draft ID on the same text.
    [before_publish] = [s for s in olga.threads.get_history(thread, limit=100) if s["next"] == ["publish"]]
    draft = dict(before_publish["values"]["draft"], draft_id="f" * 24)
    olga.threads.update_state(
        thread, {"draft": draft}, as_node="record_decision", checkpoint_id=before_publish["checkpoint_id"]
    )
    olga.runs.wait(thread, "analyst", input=None)
    assert len(server.reports_of(thread)) == 1
    # A fork by a run from that checkpoint is an operator's too: its gate would replay the answer
    # saved there in the new caller's name.
    for who in ("ann", "bob"):
        fork = server.client(who).runs.wait
        assert status_of(
            lambda f=fork: f(thread, "analyst", input=None, checkpoint_id=before_publish["checkpoint_id"])
        ) in (403, 404)
    # A copy to a new thread, sent to publish: its approvals were sealed for the old thread.
    for who in ("ann", "bob"):
        assert status_of(lambda w=who: server.client(w).threads.copy(thread)) in (403, 409)
    copy = olga.threads.copy(thread)["thread_id"]
    olga.runs.wait(copy, "analyst", command={"goto": "publish"})
    assert server.reports_of(copy) == [] and len(server.reports_of(thread)) == 1
    assert [a for a, _ in audit_names(server, thread)] == ["approved", "published"]
    assert server.audit_of(copy) == []


def _requesters_apart(server: DevServer) -> None:
    ann, dan = server.client("ann"), server.client("dan")
    theirs = dan.threads.create()["thread_id"]
    dan.runs.wait(theirs, "analyst", input={"ticker": "MSFT"})
    mine = ann.threads.create()["thread_id"]
    assert theirs not in [t["thread_id"] for t in ann.threads.search(limit=1000)]
    assert mine in [t["thread_id"] for t in ann.threads.search(limit=1000)]
    assert status_of(lambda: ann.threads.get(theirs)) == 404
    assert status_of(lambda: ann.threads.get_state(theirs)) == 404
    assert status_of(lambda: ann.threads.copy(theirs)) in (403, 404, 409)
    assert status_of(lambda: ann.threads.delete(theirs)) in (403, 404)
    assert status_of(lambda: ann.runs.wait(theirs, "analyst", input={"ticker": "NVDA"})) in (403, 404)
    # Running as another user: refused, and the thread stays empty.
    as_dan = {"ticker": "NVDA", "user_id": "dan"}
    assert status_of(lambda: ann.runs.wait(mine, "analyst", input=as_dan)) == 403
    assert not ann.threads.get_state(mine)["values"]
    assert dan.threads.get(theirs)["metadata"]["owner"] == "dan"


def test_tokens_roles_and_owners_keep_callers_apart(server: DevServer):
    assert status_of(lambda: server.client().threads.create()) == 401
    assert status_of(lambda: server.client().threads.search()) == 401
    bad = server.client("ann")
    bad.http.client.headers["Authorization"] = "Bearer 000000000000." + "A" * 43
    assert status_of(lambda: bad.threads.search()) == 401
    _requesters_apart(server)
    # An approver reads the pending request and decides.
    thread, asked = gate_request(server, "dan")
    assert server.client("bob").threads.get_state(thread)["interrupts"][0]["value"] == asked
    publishes_once(server, thread)
    # The assistant, its store and thread deletes are not for requesters or approvers.
    [assistant] = server.client("bob").assistants.search(graph_id="analyst")
    for who in ("ann", "bob"):
        client: SyncLangGraphClient = server.client(who)
        assert status_of(lambda c=client: c.assistants.delete(assistant["assistant_id"])) == 403
        assert status_of(lambda c=client: c.store.put_item(["notes"], "k", {"v": 1})) == 403
        assert status_of(lambda c=client: c.store.search_items(["notes"])) == 403
        assert status_of(lambda c=client: c.threads.delete(thread)) == 403
    assert server.client("bob").assistants.get(assistant["assistant_id"])["graph_id"] == "analyst"


def test_agent_inbox_answers(server: DevServer):
    thread, asked = gate_request(server)
    assert asked["config"] == {
        "allow_ignore": False,
        "allow_respond": True,
        "allow_edit": False,
        "allow_accept": True,
    }
    assert asked["action_request"]["args"]["draft_id"] == asked["draft_id"]
    assert asked["description"].startswith("#")
    # ignore, as Agent Inbox sends it (a state write), and as an answer; edit: refused, still waiting.
    ignore = server.client("bob").threads.update_state
    assert status_of(lambda: ignore(thread, None, as_node="__end__")) == 403
    for kind in ("ignore", "edit"):
        resume_with(server, "bob", thread, [{"type": kind, "args": asked["action_request"]}])
        refused = still_waiting(server, thread, draft_id=asked["draft_id"])["refused"]
        assert f"does not take '{kind}'" in refused
    # response: a revision with its text, in the caller's name.
    resume_with(server, "rita", thread, [{"type": "response", "args": "Say more about the drawdown."}])
    revised = still_waiting(server, thread)
    assert revised["revision"] == 2 and revised["draft_id"] != asked["draft_id"]
    assert audit_names(server, thread) == [("revised", "rita")]
    # accept: an approval of the draft shown, once.
    state = resume_with(server, "bob", thread, [{"type": "accept", "args": revised["action_request"]}])
    assert state["publication"]["created"] is True
    [document] = server.reports_of(thread)
    assert document["draft_id"] == revised["draft_id"] and document["approved_by"] == "bob"
    resume_with(server, "bob", thread, [{"type": "accept", "args": revised["action_request"]}])
    assert len(server.reports_of(thread)) == 1
