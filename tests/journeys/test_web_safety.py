"""What the inbox must never do: run text as markup, or lose or repeat a publication when the server
dies mid-approval. Real server processes; the kill is a real SIGKILL."""

from __future__ import annotations

import sys

import httpx
import pytest

from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id
from tests.support.retry import retry_while_busy
from tests.support.web import FormClient

SCRIPT = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def _as_text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    assert response.headers["content-security-policy"].startswith("default-src 'none'; script-src 'none'")
    assert SCRIPT not in response.text and "<script" not in response.text
    return response.text


def test_script_in_a_question_feedback_and_profile_notes_is_text_on_every_page(cli: Cli, serve, tmp_path):
    token = cli.ok("approvers", "add", "pat").stdout.strip()
    cli.ok("profile", "set", "--user", "ann", "--notes", SCRIPT)
    thread = unique_id("xss")
    cli.ok("analyze", "NVDA", "--thread-id", thread, "--user", "ann", "--question", SCRIPT)
    cli.ok("revise", thread, "--feedback", SCRIPT)
    server = serve(cli)
    browser = FormClient(server)
    browser.sign_in(token)

    assert ESCAPED in _as_text(browser.page("/inbox"))
    draft_page = _as_text(browser.page(f"/threads/{thread}"))
    assert draft_page.count(ESCAPED) >= 4  # question, notes, feedback history, the draft's own text
    assert 'id="profile-notes">' + ESCAPED in draft_page
    key = browser.submit(f"/threads/{thread}", f"/threads/{thread}/approve", note=SCRIPT).headers["location"]
    report_page = _as_text(browser.page(key))
    assert 'id="approval-note">' + ESCAPED in report_page and 'id="profile-notes">' + ESCAPED in report_page
    _as_text(browser.page("/reports?q=alert"))
    api = server.client(token).get(f"/api/threads/{thread}")
    assert api.headers["content-type"] == "application/json" and "content-security-policy" in api.headers
    assert api.json()["draft"]["question"] == SCRIPT  # the API returns data, for its client to escape

    page = tmp_path / "report.html"
    cli.ok("reports", "show", key.rsplit("/", 1)[1], "--html", str(page))
    html = page.read_text()
    assert SCRIPT not in html and "<script" not in html and ESCAPED in html
    assert "Content-Security-Policy" in html and 'src="data:image/svg+xml;base64,' in html


@both_backends
def test_a_server_killed_mid_approval_is_finished_by_the_cli_with_one_report(cli: Cli, serve):
    cli.env["MA_LEASE_TTL_SECONDS"] = "2"  # on Redis, the killed server's lease lives this long
    token = cli.ok("approvers", "add", "quinn").stdout.strip()
    thread = unique_id("web-kill")
    cli.ok("analyze", "NVDA", "--thread-id", thread)
    # The server dies (SIGKILL) inside publish, after the archive holds the document and before the
    # checkpoint that records it: the worst moment for exactly-once.
    server = serve(cli, command=[sys.executable, "-m", "tests.support.crash_child", "after-archive-write"])
    with pytest.raises(httpx.TransportError):
        draft_id = cli.ok("status", thread, "--json").json()["request"]["draft_id"]
        server.client(token).post(
            f"/api/threads/{thread}/approve", json={"note": "from the web", "draft_id": draft_id}
        )
    assert server.proc is not None and server.proc.wait(timeout=30) == -9

    status = cli.ok("status", thread, "--json").json()
    assert status["status"] == "approved_pending_publish" and status["approval"]["by"] == "quinn"
    finished = retry_while_busy(lambda: cli.run("approve", thread, "--json"))
    assert finished.returncode == 0, finished.stderr
    assert finished.json()["status"] == "published" and finished.json()["publication"]["created"] is False
    [document] = cli.archive_files()
    assert '"approved_by": "quinn"' in document.read_text()
