"""Decisions you can stand behind, through a real `market-analyst serve` and the real CLI on each
checkpointer: a decision is bound to the draft its approver read, made by someone entitled to it
(roles, MA_APPROVERS, separation of duties), counted once towards a quorum, and written to the audit
log. Every refusal records nothing and publishes nothing."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id
from tests.support.retry import retry_while_busy
from tests.support.web import CSRF_FIELD, HIDDEN_FIELD, FormClient


def _analyze(cli: Cli, name: str, user: str = "ann") -> tuple[str, dict]:
    thread = unique_id(name)
    view = cli.ok("analyze", "NVDA", "--thread-id", thread, "--user", user, "--json").json()
    return thread, view


def _status(cli: Cli, thread: str) -> dict:
    return cli.ok("status", thread, "--json").json()


def _audit(cli: Cli, thread: str) -> list[dict]:
    return cli.ok("audit", "list", "--thread", thread, "--json").json()


def _decide(api: httpx.Client, thread: str, action: str, **body: str) -> httpx.Response:
    """A decision on the draft the client reads first (unless `body` names one)."""
    request = api.get(f"/api/threads/{thread}").json().get("request") or {}
    fields = {"draft_id": request.get("draft_id", "x"), "content_hash": request.get("content_hash")}
    return api.post(f"/api/threads/{thread}/{action}", json=fields | body)


def _documents(cli: Cli) -> list[dict]:
    return [json.loads(path.read_text()) for path in cli.archive_files()]


@both_backends
def test_an_approval_of_a_page_left_open_while_the_thread_was_revised_is_refused(cli: Cli, serve):
    alice = cli.ok("approvers", "add", "alice").stdout.strip()
    bert = cli.ok("approvers", "add", "bert").stdout.strip()
    thread, first = _analyze(cli, "race")
    server = serve(cli)
    a, b = FormClient(server), FormClient(server)
    a.sign_in(alice)
    b.sign_in(bert)

    # Alice opens revision 1 and keeps the page; Bert revises the thread meanwhile.
    open_page = a.page(f"/threads/{thread}").text
    csrf = CSRF_FIELD.search(open_page).group(1)  # type: ignore[union-attr]
    read = dict(HIDDEN_FIELD.findall(open_page))
    assert read["draft_id"] == first["draft"]["draft_id"] and 'id="revision">1<' in open_page
    assert (
        b.submit(
            f"/threads/{thread}", f"/threads/{thread}/revise", feedback="more on the drawdown"
        ).status_code
        == 303
    )
    revised = _status(cli, thread)
    assert revised["draft"]["revision"] == 2
    audit_before = _audit(cli, thread)

    # Her click on the page she still has open, and her tool through the API with the old draft ID.
    clicked = a.http.post(
        f"/threads/{thread}/approve",
        data={"csrf_token": csrf, **read, "note": "approving revision 1 that I read"},
    )
    assert clicked.status_code == 409
    assert f"revision 2 (draft {revised['draft']['draft_id']}) is" in clicked.text
    api = server.client(alice)
    stale = api.post(f"/api/threads/{thread}/approve", json={"draft_id": read["draft_id"], "note": "rev 1"})
    assert stale.status_code == 409
    detail = stale.json()["detail"]
    assert "\n" not in detail and "revision 2" in detail and f"market-analyst status {thread}" in detail
    # The right draft ID with the content hash of what she read is refused too.
    mixed = api.post(
        f"/api/threads/{thread}/approve",
        json={"draft_id": revised["draft"]["draft_id"], "content_hash": read["content_hash"]},
    )
    assert mixed.status_code == 409
    # Nothing was recorded, nothing published.
    after = _status(cli, thread)
    assert after["status"] == "awaiting_approval" and after["approvals"] == [] and after["approval"] is None
    assert _audit(cli, thread) == audit_before and cli.archive_files() == []

    # She reloads, reads revision 2 and approves it: published once, in her name.
    approved = a.submit(f"/threads/{thread}", f"/threads/{thread}/approve", note="approving revision 2")
    assert approved.status_code == 303 and approved.headers["location"].startswith("/reports/")
    [document] = _documents(cli)
    assert document["approved_by"] == "alice" and document["approval_note"] == "approving revision 2"
    assert document["draft_id"] == revised["draft"]["draft_id"] and document["approval_verified"] is True
    assert [e["action"] for e in _audit(cli, thread)] == ["revised", "approved", "published"]


@both_backends
def test_the_cli_names_the_draft_it_decides_on_and_draft_pins_it(cli: Cli):
    thread, first = _analyze(cli, "cli-pin")
    revised = cli.ok("revise", thread, "--feedback", "say more about the trend", "--json").json()
    old, new = first["draft"]["draft_id"], revised["draft"]["draft_id"]
    for command in (
        ("approve", thread),
        ("reject", thread, "--reason", "no"),
        ("revise", thread, "--feedback", "x"),
    ):
        refused = cli.fails(*command, "--draft", old)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
        assert f"draft {old} is not the current draft" in refused.stderr
        assert f"revision 2 (draft {new}) is" in refused.stderr
    status = _status(cli, thread)
    assert status["status"] == "awaiting_approval" and status["draft"]["revision"] == 2
    assert [e["action"] for e in _audit(cli, thread)] == ["revised"] and cli.archive_files() == []

    approved = cli.ok("approve", thread, "--draft", new, "--user", "bob")
    assert f"Published thread {thread}" in approved.stdout
    unpinned_thread, unpinned = _analyze(cli, "cli-named")
    named = cli.ok("approve", unpinned_thread, "--user", "bob")
    assert f"on revision 1 of thread {unpinned_thread}, draft {unpinned['draft']['draft_id']}" in named.stdout
    assert {d["draft_id"] for d in _documents(cli)} == {new, unpinned["draft"]["draft_id"]}
    [entry] = [e for e in _audit(cli, thread) if e["action"] == "approved"]
    assert entry["actor"] == "bob" and entry["verified"] is False and entry["door"] == "cli"


def test_the_requester_may_not_approve_their_own_analysis_unless_allowed(cli: Cli, serve):
    ann = cli.ok("approvers", "add", "ann").stdout.strip()
    thread, _ = _analyze(cli, "self")
    server = serve(cli)
    refused = _decide(server.client(ann), thread, "approve")
    assert refused.status_code == 403
    assert refused.json()["detail"].startswith("'ann' asked for this analysis and may not approve it")
    browser = FormClient(server)
    browser.sign_in(ann)
    page = browser.page(f"/threads/{thread}").text
    assert "you may not: &#39;ann&#39; asked for this analysis" in page and 'id="requested-by">ann<' in page
    assert browser.submit(f"/threads/{thread}", f"/threads/{thread}/approve").status_code == 403
    assert _status(cli, thread)["approvals"] == [] and _audit(cli, thread) == []
    # She may still revise or reject her own request; only approval needs someone else.
    assert _decide(server.client(ann), thread, "revise", feedback="shorter").status_code == 200
    server.stop()

    allowed = serve(cli, env={"MA_ALLOW_SELF_APPROVAL": "true"})
    approved = _decide(allowed.client(ann), thread, "approve", note="one-person set-up")
    assert approved.status_code == 200 and approved.json()["status"] == "published"
    [document] = _documents(cli)
    assert document["approved_by"] == "ann" and document["user_id"] == "ann" and document["approval_verified"]
    entry = next(e for e in _audit(cli, thread) if e["action"] == "approved")
    assert (entry["actor"], entry["requester"], entry["verified"], entry["door"]) == (
        "ann",
        "ann",
        True,
        "api",
    )


def test_a_name_typed_at_the_command_line_is_recorded_as_unverified(cli: Cli):
    thread, _ = _analyze(cli, "self-cli")
    cli.ok("approve", thread, "--user", "ann")  # the CLI cannot know who is typing: not refused, not trusted
    entry = next(e for e in _audit(cli, thread) if e["action"] == "approved")
    assert entry["actor"] == "ann" and entry["verified"] is False and entry["door"] == "cli"
    assert _documents(cli)[0]["approval_verified"] is False


@both_backends
def test_a_reviewer_revises_only_and_the_allow_list_governs_every_decision(cli: Cli, serve):
    rita = cli.ok("approvers", "add", "rita", "--role", "reviewer").stdout.strip()
    erin = cli.ok("approvers", "add", "erin").stdout.strip()
    cli.ok("approvers", "add", "dave")
    listed = {a["name"]: a["role"] for a in cli.ok("approvers", "list", "--json").json()}
    assert listed == {"rita": "reviewer", "erin": "approver", "dave": "approver"}
    thread, _ = _analyze(cli, "roles")
    allow = {"MA_APPROVERS": "dave,rita"}
    server = serve(cli, env=allow)

    reviewer = server.client(rita)
    for action, body in (("approve", {}), ("reject", {"reason": "no"})):
        refused = _decide(reviewer, thread, action, **body)
        assert refused.status_code == 403 and "is a reviewer and may not" in refused.json()["detail"]
    assert _decide(reviewer, thread, "revise", feedback="more on the trend").status_code == 200

    outsider = server.client(erin)
    for action, body in (("approve", {}), ("reject", {"reason": "no"}), ("revise", {"feedback": "x"})):
        refused = _decide(outsider, thread, action, **body)
        assert refused.status_code == 403 and "MA_APPROVERS allows dave, rita" in refused.json()["detail"]
    # The same rule at the command line, in another process. The server copies the revise's memory
    # into the store right after it answers, holding the thread meanwhile: a command then says busy.
    for command in (
        ("approve", thread),
        ("reject", thread, "--reason", "no"),
        ("revise", thread, "--feedback", "x"),
    ):
        refused = retry_while_busy(lambda c=command: cli.run(*c, "--user", "erin", extra_env=allow))
        assert refused.returncode == 2 and "MA_APPROVERS allows" in refused.stderr, refused.stderr
    reviewer_cli = retry_while_busy(lambda: cli.run("approve", thread, "--user", "rita", extra_env=allow))
    assert reviewer_cli.returncode == 2 and "is a reviewer" in reviewer_cli.stderr, reviewer_cli.stderr
    assert _status(cli, thread)["draft"]["revision"] == 2 and cli.archive_files() == []
    assert [e["action"] for e in _audit(cli, thread)] == ["revised"]

    cli.ok("approvers", "role", "rita", "approver")  # changed in one process, counted by the server
    approved = _decide(reviewer, thread, "approve")
    assert approved.status_code == 200 and approved.json()["status"] == "published"


@both_backends
def test_two_approvals_publish_and_a_revision_resets_the_count(cli: Cli, serve):
    cli.env["MA_REQUIRED_APPROVALS"] = "2"
    tokens = {name: cli.ok("approvers", "add", name).stdout.strip() for name in ("amy", "ben", "cat")}
    thread, _ = _analyze(cli, "quorum")
    server = serve(cli)
    amy, ben, cat = (server.client(tokens[n]) for n in ("amy", "ben", "cat"))

    first = _decide(amy, thread, "approve", note="fine")
    assert first.status_code == 200 and first.json()["status"] == "awaiting_approval"
    assert [a["by"] for a in first.json()["request"]["approvals"]] == ["amy"]
    browser = FormClient(server)
    browser.sign_in(tokens["ben"])
    assert "1 of 2" in browser.page("/inbox").text
    page = browser.page(f"/threads/{thread}").text
    assert 'id="approval-count">1 of 2 approvals' in page and "amy (verified, api" in page
    twice = _decide(amy, thread, "approve")
    assert twice.status_code == 409 and "has already approved" in twice.json()["detail"]
    again = retry_while_busy(lambda: cli.run("approve", thread, "--user", "amy"))  # see above: busy
    assert again.returncode == 2 and "has already approved" in again.stderr, again.stderr

    # A revision is another draft: the approval of the first does not count for it.
    assert _decide(cat, thread, "revise", feedback="more on the drawdown").status_code == 200
    status = _status(cli, thread)
    assert status["request"]["approvals"] == [] and status["request"]["revision"] == 2
    assert _decide(amy, thread, "approve").json()["status"] == "awaiting_approval"
    assert cli.archive_files() == []
    done = _decide(ben, thread, "approve")
    assert done.status_code == 200 and done.json()["status"] == "published"
    [document] = _documents(cli)
    assert document["approved_by"] == "amy, ben" and document["draft_id"] == status["request"]["draft_id"]
    actions = [(e["action"], e["actor"], e["revision"]) for e in _audit(cli, thread)]
    assert actions == [
        ("approved", "amy", 1),
        ("revised", "cat", 1),
        ("approved", "amy", 2),
        ("approved", "ben", 2),
        ("published", "amy, ben", 2),
    ]


@both_backends
def test_eight_concurrent_approvals_by_four_approvers_publish_once_and_each_counts_once(cli: Cli, serve):
    cli.env["MA_REQUIRED_APPROVALS"] = "2"
    names = ("ava", "bo", "cy", "di")
    tokens = {name: cli.ok("approvers", "add", name).stdout.strip() for name in names}
    thread, view = _analyze(cli, "quorum-race")
    server = serve(cli)
    draft_id = view["draft"]["draft_id"]

    def approve(name: str) -> httpx.Response:
        # A client that meets a busy thread tries again, as a person clicking again would.
        with server.client(tokens[name]) as api:
            deadline = time.monotonic() + 60
            while True:
                response = api.post(f"/api/threads/{thread}/approve", json={"draft_id": draft_id})
                if (
                    response.status_code != 409
                    or "is busy" not in response.text
                    or time.monotonic() > deadline
                ):
                    return response
                time.sleep(0.05)

    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(approve, [*names, *names]))
    accepted = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code != 200]
    assert len(accepted) == 2, [r.text for r in responses]
    assert all(r.status_code == 409 for r in refused), [r.text for r in refused]
    assert all("has already approved" in r.json()["detail"] or r.json()["archive_key"] for r in refused), [
        r.text for r in refused
    ]
    assert sum(1 for r in accepted if r.json()["status"] == "published") == 1
    [document] = _documents(cli)
    entries = _audit(cli, thread)
    approvals = [e["actor"] for e in entries if e["action"] == "approved"]
    assert len(approvals) == len(accepted) == len(set(approvals))  # one entry per accepted approval
    assert document["approved_by"] == ", ".join(approvals)
    assert [e["action"] for e in entries].count("published") == 1
    assert cli.ok("audit", "verify").returncode == 0


def test_the_thread_page_shows_the_request_and_its_audit_entries(cli: Cli, serve):
    dora = cli.ok("approvers", "add", "dora").stdout.strip()
    thread, view = _analyze(cli, "page")
    cli.ok("revise", thread, "--feedback", "name the data source", "--user", "rev")
    status = _status(cli, thread)
    server = serve(cli)
    browser = FormClient(server)
    browser.sign_in(dora)
    page = browser.page(f"/threads/{thread}").text
    request = status["request"]
    assert f'id="draft-id">{request["draft_id"]}<' in page
    assert f'id="content-hash">{request["content_hash"]}<' in page
    assert 'id="revision">2<' in page and 'id="approval-count">0 of 1 approval<' in page
    assert re.search(r'id="may-approve">Approve: you may<', page)
    audit = page[page.index('id="audit"') :]
    assert "revised" in audit and "rev" in audit and "unverified" in audit and "name the data source" in audit


def test_a_seal_holds_for_its_thread_and_its_exact_decision_only():
    from market_analyst.decisions import Decision, DecisionSeal, seal_key

    seal = DecisionSeal(lambda: seal_key("records-secret"))
    decision = Decision(
        action="approve", draft_id="d" * 24, content_hash="c" * 64, by="bob", at="2026-01-01T00:00:00+00:00"
    )
    sealed = seal.seal("t-1", decision).model_dump(mode="json")
    assert seal.sealed("t-1", sealed) == Decision.model_validate(sealed)
    assert seal.sealed("t-2", sealed) is None  # a copy into another thread
    for field, value in (
        ("by", "ceo"),
        ("content_hash", "f" * 64),
        ("at", "1999-01-01T00:00:00"),
        ("verified", True),
        ("door", "web"),
        ("allow_stale", True),
        ("note", "x"),
    ):
        assert seal.sealed("t-1", sealed | {field: value}) is None, field
    assert seal.sealed("t-1", sealed | {"seal": None}) is None
    assert seal.sealed("t-1", {k: v for k, v in sealed.items() if k != "seal"}) is None
    assert seal.sealed("t-1", sealed | {"extra": 1}) is None  # malformed: not a decision at all
    assert seal.sealed("t-1", "approve") is None
    other = DecisionSeal(lambda: seal_key("another-records-store"))
    assert other.sealed("t-1", sealed) is None
