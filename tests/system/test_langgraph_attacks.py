"""LangGraph's server played by its worst users, with nothing but the SDK and a token each from
`approvers add`: a state writer, a router past the gate, a typed name, one approver under two names,
text changed between two approvals, a fork and a copy of a published thread, a client's own `at`;
and requesters reaching for others' threads, the assistant and the store. Each attack publishes
nothing and leaves no audit entry naming anyone but an authenticated caller who really decided; the
genuine approval then publishes once. Agent Inbox's answers work where they should. On a real
`langgraph dev` from the repository's langgraph.json, with MA_RECORDS both ways."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph_sdk.client import SyncLangGraphClient

from tests.support.langgraph_dev import DevServer, dev_server, status_of
from tests.support.services import new_database

CALLERS = {
    "ann": "requester",
    "dan": "requester",
    "rita": "reviewer",
    "bob": "approver",
    "carol": "approver",
    "olga": "operator",
}


def _start(request: pytest.FixtureRequest, tmp: Any, postgres_server: str, quorum: int) -> Any:
    home = tmp.mktemp(f"langgraph-{request.param}-{quorum}")
    env = {"MA_DATA_DIR": str(home / "data"), "MA_RECORDS": request.param}
    env["MA_REQUIRED_APPROVALS"] = str(quorum)
    if request.param == "postgres":
        env["POSTGRES_URL"] = new_database(postgres_server, prefix="lga_")
    return dev_server(home, env, CALLERS)


# One worker runs this module (`make test` distributes by group), so each `langgraph dev` server
# below starts once rather than once on every worker that draws one of its tests.
pytestmark = pytest.mark.xdist_group("langgraph-attacks")


@pytest.fixture(scope="module", params=["files", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: Any, postgres_server: str
) -> Iterator[DevServer]:
    with _start(request, tmp_path_factory, postgres_server, 1) as running:
        yield running


@pytest.fixture(scope="module", params=["files", "postgres"])
def quorum_server(
    request: pytest.FixtureRequest, tmp_path_factory: Any, postgres_server: str
) -> Iterator[DevServer]:
    with _start(request, tmp_path_factory, postgres_server, 2) as running:
        yield running


def _asked(server: DevServer, who: str = "ann") -> tuple[str, dict[str, Any]]:
    """A new analysis started by `who`, waiting at the gate: its thread and the gate's request."""
    client = server.client(who)
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "analyst", input={"ticker": "NVDA"})
    return thread, client.threads.get_state(thread)["interrupts"][0]["value"]


def _answer(server: DevServer, who: str, thread: str, answer: Any) -> Any:
    return server.client(who).runs.wait(thread, "analyst", command={"resume": answer})


def _still_waiting(server: DevServer, thread: str, *, draft_id: str | None = None) -> dict[str, Any]:
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


def _audit_names(server: DevServer, thread: str) -> list[tuple[str, str]]:
    return [(e["action"], e["actor"]) for e in server.audit_of(thread)]


def _publishes_once(server: DevServer, thread: str, who: str = "bob") -> None:
    """The genuine approval, by an approver through the SDK, publishes exactly one report."""
    asked = server.client(who).threads.get_state(thread)["interrupts"][0]["value"]
    state = _answer(server, who, thread, {"action": "approve", "draft_id": asked["draft_id"]})
    assert state["publication"]["created"] is True
    [document] = server.reports_of(thread)
    assert document["approved_by"] == who and document["approval_verified"] is True
    assert document["content_hash"] == asked["content_hash"]
    assert _audit_names(server, thread)[-2:] == [("approved", who), ("published", who)]


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
    thread, asked = _asked(server)
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
        assert server.reports_of(thread) == [] and _audit_names(server, thread) == []
        asked_again = _still_waiting(server, thread)
        assert "decide again" in asked_again["refused"]
    # The operator's approvals list, sealed by nobody, counts for nothing either.
    claimed = {"approvals": [_forged(asked_again) | {"seal": "0" * 64}]}
    server.client("olga").threads.update_state(thread, claimed, as_node="record_decision")
    server.client("olga").runs.wait(thread, "analyst", input=None)
    assert server.reports_of(thread) == [] and _audit_names(server, thread) == []


def test_command_goto_publish_publishes_nothing_and_the_genuine_approval_publishes_once(server: DevServer):
    thread, asked = _asked(server)
    approval = {"decision": "approved", "by": "ceo", "at": "2020-01-01", "draft_id": asked["draft_id"]}
    command = {"goto": "publish", "update": {"approval": approval}}
    for who in ("ann", "bob", "rita"):
        assert status_of(lambda w=who: server.client(w).runs.wait(thread, "analyst", command=command)) == 403
    server.client("olga").runs.wait(thread, "analyst", command={"goto": "publish"})
    _still_waiting(server, thread, draft_id=asked["draft_id"])
    server.client("olga").runs.wait(thread, "analyst", command=command)
    _still_waiting(server, thread, draft_id=asked["draft_id"])
    assert _audit_names(server, thread) == []
    _publishes_once(server, thread)


def test_typed_names_decide_nothing(server: DevServer):
    thread, asked = _asked(server)
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
        _answer(server, who, thread, {"action": "approve", "draft_id": asked["draft_id"]} | answer)
        refused = _still_waiting(server, thread, draft_id=asked["draft_id"])["refused"]
        assert why in refused, (who, answer, refused)
        assert _audit_names(server, thread) == []
    _publishes_once(server, thread)
    [entry, _] = server.audit_of(thread)
    assert entry["at"] >= asked["drafted_at"]


def test_an_approver_who_asked_for_the_analysis_may_not_approve_it(server: DevServer):
    thread, asked = _asked(server, "carol")
    assert asked["requested_by"] == "carol"
    _answer(server, "carol", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    assert "separation of duties" in _still_waiting(server, thread)["refused"]
    _publishes_once(server, thread)


def test_one_approver_under_two_names_is_one_approval(quorum_server: DevServer):
    server = quorum_server
    thread, asked = _asked(server)
    for name in ("x1", "x2"):
        _answer(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"], "by": name})
        assert "is signed in" in _still_waiting(server, thread)["refused"]
    _answer(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    _answer(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    again = _still_waiting(server, thread)
    assert "has already approved" in again["refused"] and [a["by"] for a in again["approvals"]] == ["bob"]
    assert _audit_names(server, thread) == [("approved", "bob")]
    state = _answer(server, "carol", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    assert state["publication"]["created"] is True and len(server.reports_of(thread)) == 1
    assert server.reports_of(thread)[0]["approved_by"] == "bob, carol"


def test_text_changed_between_two_approvals_keeps_neither_approval_of_the_old_text(quorum_server: DevServer):
    server = quorum_server
    thread, asked = _asked(server)
    _answer(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    # The operator changes the text under the same draft ID.
    values = server.client("olga").threads.get_state(thread)["values"]
    changed = dict(values["draft"], markdown=values["draft"]["markdown"] + "\nA line nobody approved.\n")
    server.client("olga").threads.update_state(thread, {"draft": changed}, as_node="draft_report")
    server.client("olga").runs.wait(thread, "analyst", input=None)
    now = _still_waiting(server, thread, draft_id=asked["draft_id"])
    digest = hashlib.sha256(changed["markdown"].encode()).hexdigest()
    assert now["content_hash"] == digest != asked["content_hash"]
    assert now["approvals"] == []  # bob approved other text
    _answer(server, "carol", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    assert [a["by"] for a in _still_waiting(server, thread)["approvals"]] == ["carol"]
    assert server.reports_of(thread) == []
    state = _answer(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    [document] = server.reports_of(thread)
    assert state["publication"]["created"] is True and document["markdown"] == changed["markdown"]


def test_a_fork_or_a_copy_of_a_published_thread_publishes_nothing_more(server: DevServer):
    thread, asked = _asked(server)
    _publishes_once(server, thread)
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
    assert [a for a, _ in _audit_names(server, thread)] == ["approved", "published"]
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
    thread, asked = _asked(server, "dan")
    assert server.client("bob").threads.get_state(thread)["interrupts"][0]["value"] == asked
    _publishes_once(server, thread)
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
    thread, asked = _asked(server)
    assert asked["config"] == {"allow_ignore": False, "allow_respond": True, "allow_edit": False,
                               "allow_accept": True}
    assert asked["action_request"]["args"]["draft_id"] == asked["draft_id"]
    assert asked["description"].startswith("#")
    # ignore, as Agent Inbox sends it (a state write), and as an answer; edit: refused, still waiting.
    ignore = server.client("bob").threads.update_state
    assert status_of(lambda: ignore(thread, None, as_node="__end__")) == 403
    for kind in ("ignore", "edit"):
        _answer(server, "bob", thread, [{"type": kind, "args": asked["action_request"]}])
        refused = _still_waiting(server, thread, draft_id=asked["draft_id"])["refused"]
        assert f"does not take '{kind}'" in refused
    # response: a revision with its text, in the caller's name.
    _answer(server, "rita", thread, [{"type": "response", "args": "Say more about the drawdown."}])
    revised = _still_waiting(server, thread)
    assert revised["revision"] == 2 and revised["draft_id"] != asked["draft_id"]
    assert _audit_names(server, thread) == [("revised", "rita")]
    # accept: an approval of the draft shown, once.
    state = _answer(server, "bob", thread, [{"type": "accept", "args": revised["action_request"]}])
    assert state["publication"]["created"] is True
    [document] = server.reports_of(thread)
    assert document["draft_id"] == revised["draft_id"] and document["approved_by"] == "bob"
    _answer(server, "bob", thread, [{"type": "accept", "args": revised["action_request"]}])
    assert len(server.reports_of(thread)) == 1
