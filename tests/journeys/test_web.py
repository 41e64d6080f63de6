"""The approval inbox over HTTP: a real `market-analyst serve` process on loopback, on PostgreSQL and on
Redis, driven by the forms a browser posts and by the JSON API. Threads are made with the real CLI."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id
from tests.support.web import FormClient


def _draft(cli: Cli, ticker: str, name: str, *args: str) -> str:
    thread = unique_id(name)
    cli.ok("analyze", ticker, "--thread-id", thread, "--user", "ann", *args)
    return thread


def _decide(api: httpx.Client, thread: str, action: str, body: dict) -> httpx.Response:
    """Post a decision on the thread's current draft, as a client that read it first does."""
    found = api.get(f"/api/threads/{thread}")
    draft_id = ((found.json() if found.status_code == 200 else {}).get("request") or {}).get("draft_id", "x")
    return api.post(f"/api/threads/{thread}/{action}", json={"draft_id": draft_id} | body)


def _document(cli: Cli, key: str) -> dict:
    return json.loads((cli.data_dir / "reports" / f"{key}.json").read_text())


@both_backends
def test_sign_in_list_and_approve_with_the_forms(cli: Cli, serve):
    token = cli.ok("approvers", "add", "carol").stdout.strip()
    thread = _draft(cli, "NVDA", "form")
    server = serve(cli)
    browser = FormClient(server)

    assert browser.page("/inbox").status_code == 303  # not signed in: to the sign-in page
    assert browser.sign_in("not-a-token").status_code == 401
    assert browser.http.post("/login", data={"token": token}).status_code == 403  # no CSRF token
    signed = browser.sign_in(token)
    assert signed.status_code == 303 and signed.headers["location"] == "/inbox"
    cookie = signed.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    inbox = browser.page("/inbox")
    assert inbox.status_code == 200 and thread in inbox.text and "carol" in inbox.text

    page = browser.page(f"/threads/{thread}")
    assert 'src="/threads/' in page.text and "Approve and publish" in page.text
    drafted_chart = browser.page(f"/threads/{thread}/chart.svg")
    assert drafted_chart.headers["content-type"] == "image/svg+xml"

    no_csrf = browser.http.post(f"/threads/{thread}/approve", data={"note": "x"})
    assert no_csrf.status_code == 403
    assert cli.ok("status", thread, "--json").json()["status"] == "awaiting_approval"

    # Fields that try to name someone else are ignored: the approval is the signed-in approver's.
    approved = browser.submit(
        f"/threads/{thread}", f"/threads/{thread}/approve", note="fine", user="mallory", approved_by="mallory"
    )
    assert approved.status_code == 303
    key = approved.headers["location"].rsplit("/", 1)[1]
    document = _document(cli, key)
    assert document["approved_by"] == "carol" and document["approval_note"] == "fine"
    report = browser.page(f"/reports/{key}")
    assert report.status_code == 200 and 'id="approved-by">carol<' in report.text
    # The published report shows the chart it was approved with, byte for byte.
    assert browser.page(f"/reports/{key}/chart.svg").content == drafted_chart.content
    assert key in browser.page("/reports?ticker=nvda").text

    again = browser.submit("/inbox", f"/threads/{thread}/approve")
    assert again.status_code == 409 and key in again.text
    assert len(cli.archive_files()) == 1

    assert browser.submit("/inbox", "/logout").status_code == 303
    assert browser.page("/inbox").status_code == 303  # signed out


@both_backends
def test_the_api_lists_decides_and_refuses_like_the_cli(cli: Cli, serve):
    dave = cli.ok("approvers", "add", "dave").stdout.strip()
    erin = cli.ok("approvers", "add", "erin").stdout.strip()
    to_approve, to_reject, to_revise = (_draft(cli, "NVDA", n) for n in ("api-a", "api-r", "api-v"))
    server = serve(cli, env={"MA_APPROVERS": "dave"})
    api, other = server.client(dave), server.client(erin)

    assert server.client().get("/api/threads").status_code == 401
    wrong = server.client("0" * 12 + ".nope").get("/api/threads")
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    pending = api.get("/api/threads", params={"status": "pending"}).json()
    # On Redis the tests share one server, so other tests' drafts may be waiting too.
    assert {row["thread_id"] for row in pending} >= {to_approve, to_reject, to_revise}

    assert _decide(other, to_approve, "approve", {}).status_code == 403  # not in MA_APPROVERS
    approved = _decide(api, to_approve, "approve", {"note": "ok", "approved_by": "x"})
    assert approved.status_code == 200, approved.text
    key = approved.json()["archive_key"]
    assert _document(cli, key)["approved_by"] == "dave"
    twice = _decide(api, to_approve, "approve", {})
    assert twice.status_code == 409 and twice.json()["archive_key"] == key

    missing = _decide(api, to_reject, "reject", {})
    assert missing.status_code == 422 and missing.json() == {"detail": "reason: Field required"}
    unbound = api.post(f"/api/threads/{to_reject}/reject", json={"reason": "stale"})
    assert unbound.status_code == 422 and unbound.json() == {"detail": "draft_id: Field required"}
    assert _decide(api, to_reject, "reject", {"reason": " "}).status_code == 422
    # MA_APPROVERS governs every decision, not only approval: erin may neither reject nor revise.
    assert _decide(other, to_reject, "reject", {"reason": "stale"}).status_code == 403
    assert _decide(other, to_revise, "revise", {"feedback": "x"}).status_code == 403
    rejected = _decide(api, to_reject, "reject", {"reason": "stale"}).json()
    assert rejected["status"] == "rejected" and rejected["approval"]["by"] == "dave"

    revised = _decide(api, to_revise, "revise", {"feedback": "more on the drawdown"})
    assert revised.status_code == 200 and revised.json()["draft"]["revision"] == 2
    detail = api.get(f"/api/threads/{to_revise}").json()
    assert detail["status"] == "awaiting_approval" and len(detail["draft_ids"]) == 2

    unknown = unique_id("nope")
    assert api.get(f"/api/threads/{unknown}").status_code == 404
    assert _decide(api, unknown, "approve", {}).status_code == 404
    reports = api.get("/api/reports").json()["reports"]
    assert [r["key"] for r in reports] == [key]
    assert api.get(f"/api/reports/{key}").json()["approved_by"] == "dave"
    assert api.get("/api/reports/NVDA-2025-02-14-0000").status_code == 404

    cli.ok("approvers", "remove", "erin")
    assert other.get("/api/threads").status_code == 401  # removal ends the token at once


@both_backends
def test_eight_concurrent_approval_posts_publish_one_report(cli: Cli, serve):
    token = cli.ok("approvers", "add", "frank").stdout.strip()
    thread = _draft(cli, "MSFT", "web-race")
    server = serve(cli)

    def approve(_: int) -> httpx.Response:
        with server.client(token) as api:
            return _decide(api, thread, "approve", {})

    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(approve, range(8)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] + [409] * 7, [r.text for r in responses]
    key = next(r.json()["archive_key"] for r in responses if r.status_code == 200)
    for refused in (r for r in responses if r.status_code == 409):
        detail = refused.json()
        assert "is busy" in detail["detail"] or detail["archive_key"] == key, detail
    assert [p.name for p in cli.archive_files()] == [f"{key}.json"]


def test_health_docs_and_a_store_that_is_down(cli: Cli, serve):
    token = cli.ok("approvers", "add", "hal").stdout.strip()
    up = serve(cli)
    health = httpx.get(up.url + "/healthz").json()
    assert health == {"status": "ok", "checks": {"checkpointer": "ok", "profiles": "ok", "archive": "ok"}}
    docs = httpx.get(up.url + "/docs")
    assert docs.status_code == 200 and "/api/threads/{thread_id}/approve" in docs.text
    assert "<script" not in docs.text
    assert "/api/reports/{key}" in httpx.get(up.url + "/openapi.json").json()["paths"]

    down = serve(cli, env={"POSTGRES_URL": "postgresql://ma:secret@127.0.0.1:9/none"})
    assert "warning: checkpointer: cannot connect to PostgreSQL" in down.log.read_text()
    health = httpx.get(down.url + "/healthz")
    assert (
        health.status_code == 503
        and "cannot connect to PostgreSQL" in health.json()["checks"]["checkpointer"]
    )
    assert "secret" not in health.text
    refused = down.client(token).get("/api/threads")
    assert refused.status_code == 503 and "cannot connect to PostgreSQL" in refused.json()["detail"]


def test_serve_stays_on_loopback_unless_told_and_an_approver_exists(cli: Cli):
    assert "--allow-remote" in cli.fails("serve", "--host", "0.0.0.0").stderr
    assert "approvers add" in cli.fails("serve", "--host", "0.0.0.0", "--allow-remote").stderr
