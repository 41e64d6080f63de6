"""LangGraph's own development server: `langgraph dev`, as docs/langgraph-server.md starts it, serves
langgraph.json on loopback with its auth handler, and the page's SDK and curl commands drive a run
through it with
tokens from `approvers add`: the run stops at the gate with its request, the approver's decision
publishes exactly one report in the approver's name, and a second resume publishes nothing. Decisions
the rule refuses are asked again and record nothing. With MA_RECORDS both ways."""

from __future__ import annotations

import json
import subprocess
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.support import MASTER_KEY
from tests.support.langgraph_dev import PAGE_URL, DevServer, block, dev_server
from tests.support.services import new_database

CALLERS = {"ann": "requester", "bob": "approver", "rita": "reviewer"}


# One worker runs this module (`make test` distributes by group), so each `langgraph dev` server
# below starts once rather than once on every worker that draws one of its tests.
pytestmark = pytest.mark.xdist_group("langgraph-dev")


@pytest.fixture(scope="module", params=["files", "postgres"])
def server(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: str,
    lasting: Any,
) -> DevServer:
    def start() -> AbstractContextManager[DevServer]:
        home = tmp_path_factory.mktemp("langgraph-dev")
        env = {"MA_DATA_DIR": str(home / "data"), "MA_RECORDS": request.param}
        if request.param == "postgres":
            env["POSTGRES_URL"] = new_database(postgres_server, prefix="lg_")
            env["MA_MASTER_KEY"] = MASTER_KEY  # the data keys live in the shared records database
        return dev_server(home, env, CALLERS)

    return lasting(("langgraph-dev", request.param), start)


def _against(text: str, server: DevServer) -> str:
    """A block of the page with the URL `langgraph dev` printed there replaced by this server's."""
    assert text.count(PAGE_URL) == 1, text
    return text.replace(PAGE_URL, server.url)


def _resume(server: DevServer, who: str, thread: str, decision: Any) -> Any:
    return server.client(who).runs.wait(thread, "analyst", command={"resume": decision})


def test_the_page_sdk_calls_publish_one_report_and_a_second_resume_publishes_nothing(
    server: DevServer, capsys: pytest.CaptureFixture[str]
):
    code = _against(block("python", "from langgraph_sdk import"), server)
    namespace: dict[str, Any] = {"ANN_TOKEN": server.tokens["ann"], "BOB_TOKEN": server.tokens["bob"]}
    exec(compile(code, "docs/langgraph-server.md", "exec"), namespace)
    thread, request, state = namespace["thread"], namespace["request"], namespace["state"]
    printed = capsys.readouterr().out.strip()

    # The request the gate asked with, as the SDK read it from the thread's state.
    assert request["kind"] == "approval_request" and request["thread_id"] == thread
    assert request["ticker"] == "NVDA" and request["revision"] == 1 and request["requested_by"] == "ann"
    assert request["allowed_actions"] == ["approve", "reject", "revise"]
    assert request["approvals"] == [] and request["approvals_needed"] == 1
    assert len(request["content_hash"]) == 64
    assert request["action_request"]["args"]["content_hash"] == request["content_hash"]

    # Exactly one report, of this draft, approved by the authenticated approver through this door.
    [document] = server.reports_of(thread)
    assert printed == state["publication"]["key"] == document["key"]
    assert state["publication"]["created"] is True
    assert document["draft_id"] == request["draft_id"]
    assert document["content_hash"] == request["content_hash"]
    assert document["approved_by"] == "bob" and document["approval_note"] == "checked in Studio"
    assert document["approval_verified"] is True
    audit = server.audit_of(thread)
    assert [(e["action"], e["door"], e["actor"], e["verified"]) for e in audit] == [
        ("approved", "langgraph", "bob", True),
        ("published", "langgraph", "bob", True),
    ]

    # The same decision again: the finished thread runs nothing; the run succeeds with the final state.
    client = server.client("bob")
    assert client.threads.get(thread)["status"] == "idle"
    history = client.threads.get_history(thread, limit=100)
    keys = server.report_keys()
    again = _resume(server, "bob", thread, namespace["decision"])
    assert again["publication"] == state["publication"]
    assert client.runs.list(thread)[0]["status"] == "success"
    assert client.threads.get_history(thread, limit=100) == history  # no new checkpoint
    assert server.report_keys() == keys and len(server.reports_of(thread)) == 1
    assert server.audit_of(thread) == audit
    assert "msgpack allowlist" not in server.log.read_text()  # no false security warning


def test_the_page_curl_commands_publish_one_report(server: DevServer):
    script = _against(block("bash", "API="), server)
    keys = server.report_keys()
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "ANN_TOKEN": server.tokens["ann"], "BOB_TOKEN": server.tokens["bob"]},
    )
    assert result.returncode == 0, result.stderr
    publication = json.loads(result.stdout)
    assert publication["created"] is True
    [new] = set(server.report_keys()) - set(keys)
    assert new == publication["key"]
    thread = publication["operation_id"].split(":", 1)[0]
    [document] = server.reports_of(thread)
    assert document["key"] == new and document["approved_by"] == "bob"


def test_refused_decisions_are_asked_again_and_record_nothing_until_one_is_accepted(server: DevServer):
    ann, bob = server.client("ann"), server.client("bob")
    thread = ann.threads.create()["thread_id"]
    ann.runs.wait(thread, "analyst", input={"ticker": "NVDA"})
    first = bob.threads.get_state(thread)["interrupts"][0]["value"]
    assert first["requested_by"] == "ann"  # the caller's own name, though the input named nobody

    # A reviewer's revision: a new draft, and the first one is stale from now on.
    _resume(
        server,
        "rita",
        thread,
        {
            "action": "revise",
            "draft_id": first["draft_id"],
            "note": "for a cautious reader",
            "options": {"risk_tolerance": "conservative"},
        },
    )
    current = bob.threads.get_state(thread)["interrupts"][0]["value"]
    assert current["revision"] == 2 and current["draft_id"] != first["draft_id"]
    audit = server.audit_of(thread)
    assert [(e["action"], e["actor"]) for e in audit] == [("revised", "rita")]
    keys = server.report_keys()

    for who, decision, reason in (
        ("bob", {"action": "approve", "draft_id": first["draft_id"]}, "is not the current draft"),
        ("bob", {"action": "approve", "draft_id": "0" * 24}, "is not the current draft"),
        (
            "bob",
            {"action": "approve", "draft_id": current["draft_id"], "content_hash": "f" * 64},
            "content hash",
        ),
        ("rita", {"action": "approve", "draft_id": current["draft_id"]}, "a reviewer may only revise"),
        ("ann", {"action": "approve", "draft_id": current["draft_id"]}, "requester"),
        ("bob", {"action": "reject", "draft_id": current["draft_id"]}, "needs a reason"),
    ):
        _resume(server, who, thread, decision)
        # Asked again with the reason: the thread still waits, listed, and nothing was recorded.
        assert bob.threads.get(thread)["status"] == "interrupted"
        assert thread in [t["thread_id"] for t in bob.threads.search(status="interrupted", limit=1000)]
        state = bob.threads.get_state(thread)
        asked = state["interrupts"][0]["value"]
        assert state["next"] == ["human_review"] and asked["draft_id"] == current["draft_id"]
        assert reason in asked["refused"], (decision, asked["refused"])
        assert "market-analyst status" not in asked["refused"]
        assert state["values"].get("approval") is None and state["values"].get("publication") is None
        assert server.audit_of(thread) == audit
        assert server.report_keys() == keys

    # A decision on the current draft by the approver resumes it, in the approver's name.
    assert (
        _resume(server, "bob", thread, {"action": "approve", "draft_id": current["draft_id"]})["publication"][
            "created"
        ]
        is True
    )
    [document] = server.reports_of(thread)
    assert document["draft_id"] == current["draft_id"] and document["approved_by"] == "bob"
    assert bob.threads.get(thread)["status"] == "idle"


def test_a_draft_quoting_a_memory_erased_since_is_not_published_through_the_server(server: DevServer):
    """ann's draft recalled one of her memories, which is erased before bob approves on the server:
    nothing reaches the archive, the thread waits at the gate again, and a revise (which recalls
    without it) publishes a report in which the memory's words are nowhere."""
    import secrets
    from datetime import UTC, datetime

    from market_analyst.deps import open_memory
    from market_analyst.state import Memory, memory_id

    words = f"foundry-concentration-{secrets.token_hex(4)}"
    memories = open_memory(server.settings())
    note = Memory(
        id=memory_id("remembered", "ann", words),
        owner="ann",
        kind="remembered",
        text=f"watch {words}",
        ticker="NVDA",
        created_at=datetime.now(UTC),
        said_by="ann",
    )
    memories.write([note])
    ann, bob = server.client("ann"), server.client("bob")
    thread = ann.threads.create()["thread_id"]
    ann.runs.wait(thread, "analyst", input={"ticker": "NVDA", "question": "foundry risk?"})
    asked = bob.threads.get_state(thread)["interrupts"][0]["value"]
    assert words in asked["description"]  # the draft quotes it
    assert memories.forget("ann", note.id)
    keys = server.report_keys()

    _resume(server, "bob", thread, {"action": "approve", "draft_id": asked["draft_id"]})
    state = bob.threads.get_state(thread)
    assert state["next"] == ["human_review"] and state["values"].get("publication") is None
    assert server.report_keys() == keys

    again = state["interrupts"][0]["value"]
    assert "since erased" in again["refused"] and note.id in again["refused"]
    assert "a revise re-drafts without them" in again["refused"] and "market-analyst" not in again["refused"]
    _resume(server, "rita", thread, {"action": "revise", "draft_id": again["draft_id"], "note": "again"})
    current = bob.threads.get_state(thread)["interrupts"][0]["value"]
    assert words not in current["description"]
    done = _resume(server, "bob", thread, {"action": "approve", "draft_id": current["draft_id"]})
    assert done["publication"]["created"] is True
    [document] = server.reports_of(thread)
    assert words not in json.dumps(document)
