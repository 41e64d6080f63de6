"""Events reach people: each one written beside its cause, delivered by the job queue as a Standard
Webhooks-signed POST to a receiver on loopback that verifies the signature and de-duplicates by ID;
retried with backoff, dead-lettered, sent again on request; never lost to a killed worker or a killed
`approve`, and never sent under two IDs."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import Cli, run_with_kill
from tests.support.crashkit import Forked, Harness
from tests.support.services import kill_process, stop_process
from tests.support.webhook_receiver import WebhookReceiver, new_secret

REJECT_REASON = "the valuation note is confidential-marker-7731"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(new_secret()) as rx:
        yield rx


def notifying(cli: Cli, rx: WebhookReceiver, **env: str) -> Cli:
    return Cli(
        env=cli.env
        | {"MA_WEBHOOK_URL": rx.url, "MA_WEBHOOK_SECRET": rx.secret, "MA_WEBHOOK_BACKOFF": "200ms"}
        | env,
        cwd=cli.cwd,
        harness=cli.harness,
    )


def start_worker(cli: Cli, harness: Harness, log: Path) -> Forked:
    return harness.serve(["worker"], cli.env, cli.cwd, log)


def deliveries(cli: Cli, *args: str) -> list[dict]:
    return json.loads(cli.ok("notifications", "list", "--json", *args).stdout)


def analyze(cli: Cli, ticker: str = "NVDA", user: str = "ann") -> str:
    return str(cli.ok("analyze", ticker, "--user", user, "--json").json()["thread_id"])


def test_serve_tells_each_thread_in_order_signed_once_with_no_note_in_any_payload(cli, receiver, serve):
    cli = notifying(cli, receiver)
    published, rejected, revised = analyze(cli), analyze(cli, "MSFT"), analyze(cli, "AAPL")
    server = serve(cli)
    receiver.wait_for(lambda r: all(r.of_thread(t) == ["requested"] for t in (published, rejected, revised)))
    cli.ok("approve", published, "--user", "bob")
    cli.ok("reject", rejected, "--user", "bob", "--reason", REJECT_REASON)
    cli.ok("revise", revised, "--user", "bob", "--feedback", "say more about margins")
    receiver.wait_for(lambda r: r.of_thread(published) == ["requested", "published"], what="published")
    receiver.wait_for(lambda r: r.of_thread(rejected) == ["requested", "rejected"], what="rejected")
    receiver.wait_for(lambda r: r.of_thread(revised) == ["requested", "revised", "requested"], what="revised")
    server.stop()

    assert receiver.forged == [] and receiver.repeats == 0
    bodies = json.dumps(receiver.taken)
    assert "confidential-marker-7731" not in bodies and "margins" not in bodies
    first, second = [
        e for e in receiver.taken if e["data"]["thread_id"] == revised and e["data"]["action"] == "requested"
    ]
    assert first["data"]["revision"] == 1 and second["data"]["revision"] == 2
    assert second["data"]["draft_id"] != first["data"]["draft_id"]
    done = next(e for e in receiver.taken if e["data"]["action"] == "published")
    status = cli.ok("status", published, "--json").json()
    assert done["data"]["draft_id"] == status["draft"]["draft_id"]
    assert (
        done["data"]["link"] == f"http://127.0.0.1:8000/threads/{published}?draft={done['data']['draft_id']}"
    )
    assert done["data"]["by"] == "bob" and done["type"] == "approval.published"
    assert {d["status"] for d in deliveries(cli)} == {"delivered"}


def test_a_quorum_of_two_tells_the_first_approval_as_counted(cli, receiver, harness, tmp_path):
    cli = notifying(cli, receiver, MA_REQUIRED_APPROVALS="2")
    thread = analyze(cli)
    cli.ok("approve", thread, "--user", "bob")
    cli.ok("approve", thread, "--user", "carol")
    worker = start_worker(cli, harness, tmp_path / "worker.log")
    try:
        receiver.wait_for(lambda r: r.of_thread(thread) == ["requested", "counted", "published"])
    finally:
        stop_process(worker)
    counted = next(e for e in receiver.taken if e["data"]["action"] == "counted")
    assert counted["data"]["approvals"] == "1 of 2" and counted["data"]["by"] == "bob"


def test_a_receiver_failing_three_times_gets_the_event_once_after_growing_waits(
    cli, receiver, harness, tmp_path
):
    cli = notifying(cli, receiver, MA_WEBHOOK_BACKOFF="300ms")
    receiver.fail_next(3)
    thread = analyze(cli)
    worker = start_worker(cli, harness, tmp_path / "worker.log")
    try:
        receiver.wait_for(lambda r: r.of_thread(thread) == ["requested"])
    finally:
        stop_process(worker)
    times = [at for at, _, _ in receiver.requests]
    assert [status for _, _, status in receiver.requests] == [500, 500, 500, 200]
    assert len({msg_id for _, msg_id, _ in receiver.requests}) == 1  # every attempt under one ID
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6 and gaps[2] >= 1.2, gaps  # 300 ms, doubled each time
    [row] = deliveries(cli)
    assert row["status"] == "delivered" and row["attempts"] == 4


def test_a_receiver_that_never_recovers_dead_letters_the_event_and_retry_sends_it_once(
    cli, receiver, harness, tmp_path
):
    cli = notifying(cli, receiver, MA_WEBHOOK_ATTEMPTS="3")
    receiver.fail_always()
    thread = analyze(cli)
    worker = start_worker(cli, harness, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 30
        while not deliveries(cli, "--dead"):
            assert time.monotonic() < deadline, deliveries(cli)
            time.sleep(0.2)
        [dead] = deliveries(cli, "--dead")
        assert dead["attempts"] == 3 and "answered 500" in dead["last_error"] and dead["thread_id"] == thread
        time.sleep(1.0)  # a dead delivery is not tried again by itself
        assert len(receiver.requests) == 3 and receiver.taken == []
        listed = cli.ok("notifications", "list", "--dead").stdout
        assert dead["event_id"] in listed and "dead (3 attempts)" in listed

        receiver.recover()
        assert "1 dead delivery is pending again" in cli.ok("notifications", "retry", dead["event_id"]).stdout
        receiver.wait_for(lambda r: r.of_thread(thread) == ["requested"])
        again = cli.fails("notifications", "retry", dead["event_id"])
        assert again.returncode == 2 and "has no dead delivery" in again.stderr
        unknown = cli.fails("notifications", "retry", "evt_nothing")
        assert unknown.returncode == 2 and "no event 'evt_nothing'" in unknown.stderr
        time.sleep(1.0)
    finally:
        stop_process(worker)
    assert receiver.repeats == 0 and len(receiver.taken) == 1
    assert [d["status"] for d in deliveries(cli)] == ["delivered"]


def test_a_worker_killed_mid_delivery_sends_it_again_under_the_same_id(cli, receiver, harness, tmp_path):
    cli = notifying(cli, receiver)
    receiver.hold_next()
    thread = analyze(cli)
    worker = start_worker(cli, harness, tmp_path / "worker-1.log")
    try:
        receiver.wait_until_held()
        kill_process(worker)  # after the receiver took the event, before the worker recorded it
        receiver.release()
        worker = start_worker(cli, harness, tmp_path / "worker-2.log")
        receiver.wait_for(lambda r: r.repeats == 1, timeout=45, what="the event again")
    finally:
        stop_process(worker)
    # The receiver acted once: the second request had an ID it had taken already.
    assert receiver.of_thread(thread) == ["requested"] and receiver.repeats == 1
    assert [d["status"] for d in deliveries(cli)] == ["delivered"]


def test_workers_killed_at_random_points_lose_no_event_and_never_send_one_under_two_ids(
    cli, receiver, harness, tmp_path
):
    kills = int(os.environ.get("NOTIFY_KILLS", "4"))
    cli = notifying(cli, receiver)
    threads = [analyze(cli, t) for t in ("NVDA", "MSFT", "AAPL")]
    for thread in threads:
        cli.ok("approve", thread, "--user", "bob")
    rng = random.Random(kills)
    receiver.slow_down(0.05)
    for n in range(kills):
        worker = start_worker(cli, harness, tmp_path / f"worker-{n}.log")
        time.sleep(rng.uniform(0.5, 3.0))
        kill_process(worker)
    worker = start_worker(cli, harness, tmp_path / "worker-last.log")
    try:
        receiver.wait_for(
            lambda r: all(r.of_thread(t) == ["requested", "published"] for t in threads), timeout=60
        )
    finally:
        stop_process(worker)
    kinds = [(e["data"]["thread_id"], e["data"]["action"]) for e in receiver.taken]
    assert len(kinds) == len(set(kinds)) == 6  # one ID per cause: a repeat is the same ID, never a new one


# Before: the report is archived and audited, its event not written. After: the event is written, the
# step's checkpoint not saved, so `resume` runs `publish` again and meets the same event.
@pytest.mark.parametrize("when", ["before", "after"])
def test_approve_killed_between_its_decision_and_the_event_tells_it_once_after_resume(
    cli, receiver, harness, tmp_path, when
):
    cli = notifying(cli, receiver)
    thread = analyze(cli)
    killed = run_with_kill(
        cli,
        f"call:{when}:market_analyst.persistence.notifications.store:NotificationStore.put",
        "approve",
        thread,
        "--user",
        "bob",
    )
    assert killed.returncode == -9, killed.stderr
    cli.ok("resume", thread)
    worker = start_worker(cli, harness, tmp_path / "worker.log")
    try:
        receiver.wait_for(lambda r: r.of_thread(thread) == ["requested", "published"])
        time.sleep(1.0)
    finally:
        stop_process(worker)
    assert receiver.of_thread(thread) == ["requested", "published"] and receiver.repeats == 0
    assert len(deliveries(cli)) == 2


def test_without_a_webhook_the_worker_refuses_in_one_line_and_nothing_is_written(cli):
    thread = analyze(cli)
    cli.ok("approve", thread, "--user", "bob")
    refused = cli.fails("worker")
    assert refused.returncode == 2 and "MA_WEBHOOK_URL" in refused.stderr
    assert "No deliveries." in cli.ok("notifications", "list").stderr
    half = cli.fails("worker", extra_env={"MA_WEBHOOK_URL": "http://127.0.0.1:9/hooks"})
    assert half.returncode == 2 and "MA_WEBHOOK_SECRET" in half.stderr
    weak = cli.fails(
        "notifications",
        "list",
        extra_env={"MA_WEBHOOK_URL": "http://127.0.0.1:9/h", "MA_WEBHOOK_SECRET": "hunter2"},
    )
    assert "whsec_" in weak.stderr and "hunter2" not in weak.stderr


def test_a_waiting_draft_is_reminded_escalated_and_expired_in_order_and_an_approved_one_is_left_alone(
    cli, receiver, serve
):
    cli = notifying(
        cli,
        receiver,
        MA_DECISION_DUE="2s",
        MA_REMIND_EVERY="1s",
        MA_MAX_REMINDERS="1",
        MA_ESCALATE_TO="dora",
        MA_EXPIRE_AFTER="6s",
    )
    token = cli.ok("approvers", "add", "bob").stdout.strip()
    # The approved thread is drafted and approved at one frozen moment, so a loaded machine cannot
    # push its approval past its 6 s expiry; no worker runs until it is decided.
    frozen = {"SOURCE_DATE_EPOCH": str(int(time.time()))}
    approved = cli.ok("analyze", "MSFT", "--user", "ann", "--json", extra_env=frozen).json()["thread_id"]
    cli.ok("approve", approved, "--user", "bob", extra_env=frozen)
    waiting = analyze(cli)
    server = serve(cli)  # its worker keeps the due times
    receiver.wait_for(
        lambda r: r.of_thread(waiting) == ["requested", "reminded", "escalated", "expired"],
        timeout=40,
        what="the expiry",
    )
    time.sleep(1.5)  # a tick or more after the expiry: nothing more for either thread
    api = server.client(token)
    shown = api.get(f"/api/threads/{waiting}").json()
    assert shown["status"] == "expired" and shown["request"]["expired_at"], shown
    draft_id = shown["request"]["draft_id"]
    answer = api.post(f"/api/threads/{waiting}/approve", json={"draft_id": draft_id})
    assert answer.status_code == 409 and "expired at" in answer.json()["detail"], answer.text
    # Still in sight: listed as waiting, as expired, for a revise.
    listed = {t["thread_id"]: t["status"] for t in cli.ok("threads", "--pending", "--json").json()}
    assert listed.get(waiting) == "expired", listed
    assert receiver.of_thread(waiting) == ["requested", "reminded", "escalated", "expired"]
    told = {e["data"]["action"]: e["data"] for e in receiver.taken if e["data"]["thread_id"] == waiting}
    assert told["escalated"]["to"] == ["dora"] and told["reminded"]["by"] is None
    assert told["requested"]["due_at"] == told["escalated"]["at"] and told["expired"]["by"] == "deadline"
    # The approved thread: nothing after its decision (a reminder may precede it, never follow it).
    kinds = receiver.of_thread(approved)
    assert (
        kinds[0] == "requested"
        and kinds[-1] == "published"
        and set(kinds) <= {"requested", "reminded", "published"}
    )

    # An expired draft is not approved, by any door: one line, exit 2, and the way on.
    refused = cli.fails("approve", waiting, "--user", "bob")
    assert refused.returncode == 2 and "expired at" in refused.stderr and "revise" in refused.stderr
    status = cli.ok("status", waiting, "--json").json()
    assert status["status"] == "expired" and status["request"]["expired_at"]
    assert "expired" in cli.ok("status", waiting).stdout
    audit = json.loads(cli.ok("audit", "list", "--thread", waiting, "--json").stdout)
    assert [e["action"] for e in audit] == ["expired"] and audit[0]["actor"] == "deadline"
    assert "verifies" in cli.ok("audit", "verify").stdout
    # A revise (here through the API) drafts it again, with due times of its own.
    revised = api.post(
        f"/api/threads/{waiting}/revise", json={"draft_id": draft_id, "feedback": "fresh data"}
    )
    assert revised.status_code == 200, revised.text
    server.stop()
    again = cli.ok("status", waiting, "--json").json()
    assert again["status"] == "awaiting_approval" and again["request"]["revision"] == 2
    assert again["request"]["expires_at"] > status["request"]["expires_at"]


def test_preview_shows_a_threads_due_times_with_the_clock_moved_instead_of_waited_for(cli):
    epoch = 1_767_225_600  # 2026-01-01T00:00:00Z
    env = {
        "SOURCE_DATE_EPOCH": str(epoch),
        "MA_DECISION_DUE": "24h",
        "MA_REMIND_EVERY": "8h",
        "MA_MAX_REMINDERS": "2",
        "MA_ESCALATE_TO": "dora,eve",
        "MA_EXPIRE_AFTER": "3d",
    }
    thread = cli.ok("analyze", "NVDA", "--user", "ann", "--json", extra_env=env).json()["thread_id"]
    early = json.loads(cli.ok("notifications", "preview", thread, "--json", extra_env=env).stdout)
    assert early["requested_at"] == "2026-01-01T00:00:00+00:00" and early["fallen_due"] == []
    assert early["reminders"] == ["2026-01-01T08:00:00+00:00", "2026-01-01T16:00:00+00:00"]
    assert early["due_at"] == early["escalate_at"] == "2026-01-02T00:00:00+00:00"
    assert early["escalate_to"] == ["dora", "eve"] and early["expires_at"] == "2026-01-04T00:00:00+00:00"
    later = env | {"SOURCE_DATE_EPOCH": str(epoch + 25 * 3600)}
    shown = cli.ok("notifications", "preview", thread, extra_env=later).stdout
    assert (
        "reminded 1 at 2026-01-01T08:00:00+00:00; reminded 2 at 2026-01-01T16:00:00+00:00; escalated at"
        in shown
    )
    assert "expired" not in shown.split("by now", 1)[1].split("\n", 1)[0]
    status = cli.ok("status", thread, extra_env=later).stdout
    assert "Decision due by 2026-01-02T00:00:00+00:00; expires at 2026-01-04T00:00:00+00:00" in status
    past = env | {"SOURCE_DATE_EPOCH": str(epoch + 4 * 86400)}
    refused = cli.fails("approve", thread, "--user", "bob", extra_env=past)
    assert "expired at 2026-01-04T00:00:00+00:00" in refused.stderr
    cli.ok("approve", thread, "--user", "bob", extra_env=env | {"SOURCE_DATE_EPOCH": str(epoch + 3600)})


def test_forget_takes_a_user_out_of_the_events_and_nothing_more_is_sent_in_their_name(cli, receiver):
    import psycopg

    cli = notifying(cli, receiver)
    hers, his = analyze(cli, user="ann"), analyze(cli, "MSFT", user="cy")
    cli.ok("approve", hers, "--user", "bob")
    cli.ok("reject", his, "--user", "bob", "--reason", "not now")
    waiting = deliveries(cli)  # requested twice, published, rejected: no worker has run
    assert [d["status"] for d in waiting] == ["waiting"] * 4 and {d["receiver"] for d in waiting} == {"-"}

    def bodies() -> list[dict]:
        with psycopg.connect(cli.env["POSTGRES_URL"]) as conn:
            return [row[0] for row in conn.execute("SELECT body FROM ma_events ORDER BY seq")]

    assert any(b["by"] == "bob" for b in bodies())
    forgot = cli.ok("forget", "--user", "bob", "--yes").stdout
    assert "events (their threads' removed, their name taken out of others'): 2" in forgot
    assert all("bob" not in json.dumps(b) for b in bodies()) and len(bodies()) == 4
    cli.ok("forget", "--user", "ann", "--yes")
    assert {b["thread_id"] for b in bodies()} == {his}
    assert {d["thread_id"] for d in deliveries(cli)} == {his}


def test_email_reaches_the_approvers_with_a_link_that_decides_nothing_and_names_the_current_draft(cli, serve):
    from tests.support.smtp_server import SmtpServer
    from tests.support.web import FormClient

    with SmtpServer() as smtp:
        cli = Cli(
            env=cli.env | {"MA_SMTP_URL": smtp.url, "MA_PUBLIC_URL": "http://inbox.test"},
            cwd=cli.cwd,
            harness=cli.harness,
        )
        token = cli.ok("approvers", "add", "dora", "--email", "dora@example.test").stdout.strip()
        cli.ok("approvers", "add", "rev", "--role", "reviewer", "--email", "rev@example.test")
        cli.ok("approvers", "add", "bob")  # no address: no mail
        assert "dora@example.test" in cli.ok("approvers", "list").stdout
        bad = cli.fails("approvers", "set-email", "bob", "not an address")
        assert bad.returncode == 2 and "is not an email address" in bad.stderr
        thread = analyze(cli)
        server = serve(cli)  # its worker sends the mail
        smtp.wait_for(lambda s: len(s.to("dora@example.test")) == 1)
        [first] = smtp.to("dora@example.test")
        assert smtp.to("rev@example.test") == []  # a reviewer is not asked to approve
        old = cli.ok("status", thread, "--json").json()["request"]
        body = first.get_content()
        link = f"http://inbox.test/threads/{thread}?draft={old['draft_id']}"
        assert "decision requested (revision 1)" in first["Subject"] and link in body
        assert "decides nothing" in body and old["draft_id"] in body

        cli.ok("revise", thread, "--user", "dora", "--feedback", "look again at margins")
        smtp.wait_for(lambda s: len(s.to("dora@example.test")) == 2)
        current = cli.ok("status", thread, "--json").json()["request"]
        assert current["revision"] == 2

        browser = FormClient(server)
        path = link.removeprefix("http://inbox.test")
        assert browser.page(path).status_code == 303  # the link alone: to the sign-in page, nothing decided
        assert browser.sign_in(token).status_code == 303
        page = browser.page(path)
        assert page.status_code == 200
        assert (
            f"names revision 1 (draft {old['draft_id']}), which is no longer the current draft" in page.text
        )
        assert f"revision 2 (draft {current['draft_id']}) replaced it" in page.text
        assert f'value="{current["draft_id"]}"' in page.text and f'value="{old["draft_id"]}"' not in page.text
        for _ in range(3):  # a mail scanner following the link, again and again
            browser.page(path)
        assert cli.ok("status", thread, "--json").json()["status"] == "awaiting_approval"
        assert (
            json.loads(cli.ok("audit", "list", "--thread", thread, "--json").stdout)[-1]["action"]
            == "revised"
        )
        # The old draft is refused on the form too; the current one is approved.
        stale = browser.submit(
            path, f"/threads/{thread}/approve", draft_id=old["draft_id"], content_hash=old["content_hash"]
        )
        assert stale.status_code == 409
        assert browser.submit(path, f"/threads/{thread}/approve").status_code == 303
        server.stop()
    assert cli.ok("status", thread, "--json").json()["status"] == "published"


def test_two_replicas_and_a_worker_deliver_each_event_of_fifty_threads_once(
    cli, receiver, serve, harness, tmp_path, postgres_url
):
    from concurrent.futures import ThreadPoolExecutor

    from tests.support import SHARED_RECORDS

    env = {"POSTGRES_URL": cli.env.get("POSTGRES_URL") or postgres_url, **SHARED_RECORDS}
    cli = notifying(Cli(env=cli.env | env, cwd=cli.cwd, harness=cli.harness), receiver)
    token = cli.ok("approvers", "add", "bob").stdout.strip()
    replicas = [serve(cli, env={"MA_DATA_DIR": str(cli.cwd / f"host-{n}")}) for n in (1, 2)]
    worker = harness.serve(
        ["worker"], cli.env | {"MA_DATA_DIR": str(cli.cwd / "host-3")}, cli.cwd, tmp_path / "w.log"
    )
    try:
        tickers = ["NVDA", "MSFT", "AAPL", "AMZN", "GOOG"] * 10
        started = harness.run_together(
            [(["analyze", t, "--user", "ann", "--json"], cli.env) for t in tickers], cwd=cli.cwd
        )
        assert all(o.returncode == 0 for o in started), [o.stderr for o in started if o.returncode]
        threads = [json.loads(o.stdout)["thread_id"] for o in started]
        apis = [replica.client(token) for replica in replicas]

        def approve(n_thread: tuple[int, str]) -> int:
            n, thread = n_thread
            api = apis[n % 2]
            draft_id = api.get(f"/api/threads/{thread}").json()["request"]["draft_id"]
            return api.post(f"/api/threads/{thread}/approve", json={"draft_id": draft_id}).status_code

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(approve, enumerate(threads))) == {200}
        receiver.wait_for(lambda r: len(r.taken) == 100, timeout=90, what="100 events")
        time.sleep(2.0)  # two ticks more: nothing is sent again
    finally:
        stop_process(worker)
        for replica in replicas:
            replica.stop()
    assert receiver.repeats == 0 and receiver.forged == []
    assert all(receiver.of_thread(t) == ["requested", "published"] for t in threads)
    rows = deliveries(cli)
    assert len(rows) == 100 and {(r["status"], r["attempts"]) for r in rows} == {("delivered", 1)}
