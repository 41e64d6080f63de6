"""An approved draft whose publication was cut short is never out of sight, and `serve` publishes it
without anyone running `resume`: the approving command is killed (SIGKILL) after the archive write and
before the checkpoint that records it, the worst moment for exactly-once. `threads --pending`, the
inbox and the API list the thread as approved and publishing; a server whose look is due finishes it
with one report and one "published" audit entry, in the approver's name. On both checkpointers."""

from __future__ import annotations

import time

from tests.support.backends import both_backends
from tests.support.cli import Cli, run_with_kill, unique_id
from tests.support.web import FormClient


@both_backends
def test_an_approval_cut_short_is_listed_as_publishing_and_serve_publishes_it_once(cli: Cli, serve):
    cli.env["MA_LEASE_TTL_SECONDS"] = "2"  # on Redis, the killed command's lease lives this long
    token = cli.ok("approvers", "add", "rita").stdout.strip()
    thread = unique_id("cut-short")
    cli.ok("analyze", "NVDA", "--thread-id", thread, "--user", "ann")
    killed = run_with_kill(cli, "after-archive-write", "approve", thread, "--user", "bob")
    assert killed.returncode == -9, killed.stderr
    [document] = cli.archive_files()
    assert cli.ok("status", thread, "--json").json()["status"] == "approved_pending_publish"

    # Listed wherever waiting drafts are, marked as what it is.
    listed = cli.ok("threads", "--pending").stdout
    [line] = [row for row in listed.splitlines() if thread in row]
    assert "approved, publishing" in line
    rows = cli.ok("threads", "--pending", "--json").json()
    assert [r["status"] for r in rows if r["thread_id"] == thread] == ["approved_pending_publish"]
    assert (
        "give one of --pending and --status"
        in cli.fails("threads", "--pending", "--status", "published").stderr
    )

    # A server whose look is not due yet lists it and leaves it alone.
    patient = serve(cli, env={"MA_PUBLISH_RETRY": "1h"})
    [shown] = [r for r in patient.client(token).get("/api/threads").json() if r["thread_id"] == thread]
    assert shown["status"] == "approved_pending_publish" and shown["approvals"] == 1
    browser = FormClient(patient)
    browser.sign_in(token)
    inbox = browser.page("/inbox").text
    assert thread in inbox and "approved, publishing" in inbox
    patient.stop()
    assert cli.ok("status", thread, "--json").json()["status"] == "approved_pending_publish"

    # One whose look comes every second publishes it: no `resume`, no second approval.
    eager = serve(cli, env={"MA_PUBLISH_RETRY": "1s"})
    deadline = time.monotonic() + 60
    while f"published thread {thread}" not in eager.log.read_text():  # said once it is published
        assert time.monotonic() < deadline, eager.log.read_text()[-2000:]
        time.sleep(0.5)
    status = cli.ok("status", thread, "--json").json()
    assert status["status"] == "published", status["status"]
    assert cli.archive_files() == [document]  # the report written before the kill, and no other
    assert status["publication"]["key"] + ".json" == document.name
    actions = [
        (e["action"], e["actor"]) for e in cli.ok("audit", "list", "--thread", thread, "--json").json()
    ]
    assert actions == [("approved", "bob"), ("published", "bob")], actions
    assert not any(call[0] in ("resume", "approve") for call in cli.calls)
    assert thread not in cli.ok("threads", "--pending").stdout
