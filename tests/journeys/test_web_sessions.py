"""Sessions that end: a real `market-analyst serve` (two of them where it matters) on loopback, on
PostgreSQL and on Redis. A cookie copied before sign-out, a timeout or a revocation is refused
afterwards by pages, forms and the API, and `approvers sessions` sees and ends them."""

from __future__ import annotations

import base64
import contextlib
import time

import httpx

from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id
from tests.support.web import CSRF_FIELD, FormClient, WebServer


def _signed_in(server: WebServer, token: str) -> tuple[FormClient, str]:
    browser = FormClient(server)
    assert browser.sign_in(token).status_code == 303
    return browser, browser.http.cookies["ma_session"]


def _copy(server: WebServer, cookie: str) -> httpx.Client:
    """Another client carrying a copy of a browser's session cookie, as a thief would."""
    thief = server.client()
    thief.cookies.set("ma_session", cookie)
    return thief


def _decoded(cookie: str) -> str:
    """Everything a signed cookie's parts say, base64 or not."""
    parts = [cookie]
    for part in cookie.split("."):
        with contextlib.suppress(ValueError):
            parts.append(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode("latin-1"))
    return " ".join(parts)


def _works(client: httpx.Client) -> bool:
    response = client.get("/inbox")
    assert response.status_code in (200, 303), response.text
    return response.status_code == 200


@both_backends
def test_a_cookie_copied_before_sign_out_is_refused_after_it_by_pages_forms_and_the_api(cli: Cli, serve):
    token = cli.ok("approvers", "add", "bob").stdout.strip()
    thread = unique_id("stolen")
    cli.ok("analyze", "NVDA", "--thread-id", thread)
    server = serve(cli)
    browser, cookie = _signed_in(server, token)
    thief = _copy(server, cookie)
    assert _works(thief)
    form = thief.get(f"/threads/{thread}")
    csrf = CSRF_FIELD.search(form.text)
    assert form.status_code == 200 and csrf
    assert csrf.group(1) not in cookie  # the cookie is an opaque ID: no CSRF token to decode
    anonymous = server.client().get("/login")
    nonce_cookie, login_csrf = anonymous.cookies["ma_session"], CSRF_FIELD.search(anonymous.text)
    assert login_csrf and login_csrf.group(1) not in _decoded(nonce_cookie)

    assert browser.submit("/inbox", "/logout").status_code == 303
    assert not _works(thief) and thief.get("/inbox").headers["location"] == "/login"
    assert thief.get(f"/threads/{thread}").status_code == 303
    approved = thief.post(f"/threads/{thread}/approve", data={"csrf_token": csrf.group(1), "note": "x"})
    assert approved.status_code == 401
    assert thief.get("/api/threads").status_code == 401  # the API never takes a cookie
    assert thief.post(f"/api/threads/{thread}/approve", json={}).status_code == 401
    assert cli.ok("status", thread, "--json").json()["status"] == "awaiting_approval"
    assert cli.archive_files() == []
    assert "No signed-in sessions" in cli.ok("approvers", "sessions", "bob").stderr


@both_backends
def test_idle_and_absolute_timeouts_end_a_session(cli: Cli, serve):
    token = cli.ok("approvers", "add", "cleo").stdout.strip()
    idle = serve(cli, env={"MA_SESSION_IDLE": "3s", "MA_SESSION_MAX": "1h"})
    _, cookie = _signed_in(idle, token)
    thief = _copy(idle, cookie)
    for _ in range(3):  # used every second, it stays alive past the idle limit
        time.sleep(1)
        assert _works(thief)
    time.sleep(3.5)
    assert not _works(thief)

    capped = serve(cli, env={"MA_SESSION_IDLE": "1h", "MA_SESSION_MAX": "4s"})
    # The session starts somewhere between these two moments: younger than the time since the first
    # while it must work, older than the time since the second when it must have ended.
    before = time.monotonic()
    _, cookie = _signed_in(capped, token)
    after = time.monotonic()
    thief = _copy(capped, cookie)
    while time.monotonic() - before < 3:
        assert _works(thief)
        time.sleep(0.5)
    time.sleep(max(0.0, 4.5 - (time.monotonic() - after)))
    assert not _works(thief)  # in use all along, and still ended at the absolute limit
    flags = set(thief.get("/login").headers["set-cookie"].lower().split("; "))
    assert flags >= {"httponly", "samesite=strict"}


@both_backends
def test_approvers_sessions_revoke_ends_a_session_at_once_in_every_server_process(cli: Cli, serve):
    token = cli.ok("approvers", "add", "dana").stdout.strip()
    first, second = serve(cli), serve(cli)
    _, cookie_a = _signed_in(first, token)
    _, cookie_b = _signed_in(second, token)
    # One store: a session made by one server is honoured by the other.
    assert _works(_copy(second, cookie_a)) and _works(_copy(first, cookie_b))
    listed = cli.ok("approvers", "sessions", "dana", "--json").json()["sessions"]
    assert len(listed) == 2 and {s["client"] for s in listed} == {"127.0.0.1"}
    for path in (cli.data_dir / "sessions").iterdir():  # the store holds digests, never a cookie
        for session_id in (cookie_a[2:], cookie_b[2:]):
            assert session_id not in path.read_text() and session_id not in path.name
    assert (cli.data_dir / "sessions").stat().st_mode & 0o777 == 0o700

    oldest = listed[0]["session"]
    ended = cli.ok("approvers", "sessions", "dana", "--revoke", "--session", oldest)
    assert "Ended 1 session" in ended.stdout
    assert not _works(_copy(first, cookie_a)) and not _works(_copy(second, cookie_a))
    assert _works(_copy(first, cookie_b)) and _works(_copy(second, cookie_b))
    again = cli.fails("approvers", "sessions", "dana", "--revoke", "--session", oldest)
    assert "has no session" in again.stderr
    assert "--revoke" in cli.fails("approvers", "sessions", "dana", "--session", oldest).stderr
    assert "no approver named" in cli.fails("approvers", "sessions", "nobody").stderr

    cli.ok("approvers", "sessions", "dana", "--revoke")
    assert not _works(_copy(first, cookie_b)) and not _works(_copy(second, cookie_b))
    assert cli.ok("approvers", "sessions", "dana", "--json").json()["sessions"] == []


def test_removing_an_approver_or_issuing_a_new_token_ends_their_sessions(cli: Cli, serve):
    token = cli.ok("approvers", "add", "eve").stdout.strip()
    server = serve(cli)
    _, cookie = _signed_in(server, token)
    assert _works(_copy(server, cookie))
    cli.ok("approvers", "remove", "eve")
    assert not _works(_copy(server, cookie))
    new_token = cli.ok("approvers", "add", "eve").stdout.strip()  # a new token for the same name
    assert not _works(_copy(server, cookie))  # does not bring the old session back
    _, fresh = _signed_in(server, new_token)
    assert _works(_copy(server, fresh)) and fresh != cookie


def test_requesters_and_operators_do_not_sign_in_to_the_inbox(cli: Cli, serve):
    # They work through LangGraph's server; the inbox lists every user's pending threads.
    tokens = {
        role: cli.ok("approvers", "add", f"x-{role}", "--role", role).stdout.strip()
        for role in ("requester", "operator", "reviewer")
    }
    server = serve(cli)
    for role in ("requester", "operator"):
        response = FormClient(server).sign_in(tokens[role])
        assert response.status_code == 403 and "reviewers and approvers" in response.text
        api = server.client()
        answer = api.get("/api/threads", headers={"Authorization": f"Bearer {tokens[role]}"})
        assert answer.status_code == 403, answer.text
    # A reviewer signed in, then made a requester, is signed out at once.
    _, cookie = _signed_in(server, tokens["reviewer"])
    assert _works(_copy(server, cookie))
    cli.ok("approvers", "role", "x-reviewer", "requester")
    assert not _works(_copy(server, cookie))
