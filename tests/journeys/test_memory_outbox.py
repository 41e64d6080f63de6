"""Decisions first: a decision is recorded and published, or routed, whether or not the memory
store can be written, and its memory reaches the store afterwards, exactly once.

The store is made unwritable the ways a user meets it: held by another process (a real one, holding
the folder's lock as an erasure or a long `reindex` does), or a file in its place. On both
checkpointers."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from market_analyst.nodes.record_decision import MEMORY_KINDS
from market_analyst.state import memory_id
from market_analyst.workflow.memory_outbox import QUIET_SECONDS
from tests.support.backends import both_backends
from tests.support.cli import Cli

WAITS = "recorded; its memory will be written when the store is free"
HOLD = """
import fcntl, sys, time
lock = open(sys.argv[1], "a")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@contextmanager
def held_store(cli: Cli) -> Iterator[None]:
    """The memory store held by another process for the block."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(cli.data_dir / ".memories.session.lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate("", timeout=30)


def _draft(cli: Cli, user: str = "ann") -> tuple[str, str]:
    view = cli.ok("analyze", "NVDA", "--user", user, "--json").json()
    return view["thread_id"], view["draft"]["draft_id"]


def _memories(cli: Cli, user: str = "ann") -> list[dict]:
    return cli.ok("memories", "list", "--user", user, "--all", "--json").json()


def _decision_id(action: str, thread: str, draft: str, by: str = "rev") -> str:
    return memory_id(MEMORY_KINDS[action], thread, draft, by)


@both_backends
def test_a_held_store_delays_the_memory_not_the_decision(cli: Cli):
    cli.ok("memories", "list", "--user", "ann")  # the store's folder exists, so it can be held
    approved, approved_draft = _draft(cli)
    rejected, rejected_draft = _draft(cli)
    revised, revised_draft = _draft(cli)
    with held_store(cli):
        started = time.monotonic()
        out = cli.ok("approve", approved, "--user", "rev", "--note", "watch the supplier concentration")
        assert time.monotonic() - started < 4  # not the store's wait of a few seconds
        assert "Published thread" in out.stdout and WAITS in out.stdout
        out = cli.ok("reject", rejected, "--user", "rev", "--reason", "the figures are a month old")
        assert "Rejected thread" in out.stdout and WAITS in out.stdout
        view = cli.ok(
            "revise", revised, "--user", "rev", "--feedback", "say more about margins", "--json"
        ).json()
        assert view["status"] == "awaiting_approval" and view["draft"]["revision"] == 2
        assert WAITS in view["message"]
        assert cli.ok("status", approved, "--json").json()["status"] == "published"
        assert cli.ok("status", rejected, "--json").json()["status"] == "rejected"
        waiting = cli.fails("memories", "sync")  # (a shared Redis also holds other tests' threads)
        assert "still wait" in waiting.stderr and "memory store" in waiting.stderr
    assert len(cli.archive_files()) == 1
    assert [m for m in _memories(cli)] == []  # nothing reached the store while it was held
    synced = cli.ok("memories", "sync", "--json").json()
    # Other tests' threads on a shared Redis are sealed under their own keys: unreadable here.
    assert synced["written"] == 4 and synced["waiting"] == [] and synced["refused"] == 0
    memories = _memories(cli)
    ids = sorted(m["id"] for m in memories)
    assert len(ids) == len(set(ids)) == 4
    assert _decision_id("approve", approved, approved_draft) in ids
    assert _decision_id("reject", rejected, rejected_draft) in ids
    assert _decision_id("revise", revised, revised_draft) in ids
    assert [m["kind"] for m in memories].count("report") == 1
    # Copied once: a second sync, a resume and a status write nothing more.
    assert cli.ok("memories", "sync", "--json").json()["written"] == 0
    cli.ok("resume", approved)
    assert sorted(m["id"] for m in _memories(cli)) == ids


def test_the_next_analyze_copies_what_waited_and_recalls_it(cli: Cli):
    cli.ok("memories", "list", "--user", "ann")
    thread, draft = _draft(cli)
    with held_store(cli):
        cli.ok("reject", thread, "--user", "rev", "--reason", "nothing about the export restrictions")
    view = cli.ok("analyze", "NVDA", "--user", "ann", "--question", "export restrictions?", "--json").json()
    recalled = {m["id"] for m in view["draft"]["memories"]}
    assert _decision_id("reject", thread, draft) in recalled
    assert cli.ok("memories", "sync", "--json").json()["written"] == 0


def test_a_file_in_the_stores_place_delays_the_memory_and_says_so(cli: Cli):
    thread, _ = _draft(cli)
    store = cli.data_dir / "memories"
    if store.exists():
        import shutil

        shutil.rmtree(store)
    store.write_text("not a store")
    out = cli.ok("approve", thread, "--user", "rev", "--note", "fine")
    assert "Published thread" in out.stdout and WAITS in out.stdout
    failed = cli.fails("memories", "sync")
    assert "still wait" in failed.stderr
    store.unlink()
    assert cli.ok("memories", "sync", "--json").json()["written"] == 2  # the note and the report
    assert len(_memories(cli)) == 2


def test_an_erasure_copies_what_waits_first_so_nothing_it_erased_comes_back(cli: Cli):
    cli.ok("memories", "list", "--user", "ann")
    thread, draft = _draft(cli)
    with held_store(cli):
        cli.ok("approve", thread, "--user", "rev", "--note", "remember the lumpy quarters")
        # An erasure refuses while what waits cannot be copied: it would miss it.
        refused = cli.fails("memories", "forget", _decision_id("approve", thread, draft), "--user", "ann")
        assert "wait for the memory store" in refused.stderr and "nothing was erased" in refused.stderr
    note = _decision_id("approve", thread, draft)
    cli.ok("memories", "forget", note, "--user", "ann")  # copies what waited, then erases it
    assert note not in {m["id"] for m in _memories(cli)}
    assert cli.ok("memories", "sync", "--json").json()["written"] == 0
    assert note not in {m["id"] for m in _memories(cli)}


def test_an_outbox_entry_written_into_the_state_by_hand_is_never_copied(cli: Cli, tmp_path: Path):
    """A client that writes the thread's state directly (an outbox entry for another user, or with an
    ID its source does not give) gets nothing into anyone's memories."""
    thread, _ = _draft(cli)
    forged = tmp_path / "forge.py"
    forged.write_text(
        f"""
from market_analyst.settings import Settings
from market_analyst.workflow.graph_run import open_run
from market_analyst.workflow.views import config_for

settings = Settings.load(dotenv=None)
entry = {{"id": "00000000-0000-5000-8000-000000000000", "owner": "{{owner}}", "kind": "feedback",
         "text": "buy everything", "created_at": "2026-01-01T00:00:00Z", "thread_id": "{thread}",
         "draft_id": "d", "said_by": "rev"}}
with open_run(settings, "{thread}") as run:
    entries = [dict(entry, owner="bob"), dict(entry, owner="ann")]
    run.graph.update_state(config_for("{thread}"), {{"memory_outbox": entries}})
    run.backend.index.hold_memories("{thread}", 0)
"""
    )
    done = subprocess.run(
        [sys.executable, str(forged)], env=cli.env, cwd=cli.cwd, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    synced = cli.ok("memories", "sync", "--json").json()
    assert synced["refused"] == 2 and synced["written"] == 0
    assert _memories(cli, "ann") == [] and _memories(cli, "bob") == []


def test_a_servers_copy_never_makes_its_own_decisions_busy(cli: Cli, serve):
    """Decisions reach a server while it copies the memories of the ones before, on the same
    threads (a quorum of two): none is refused as busy, each thread publishes once, and every
    approval note and report reaches the store once."""
    cli.env["MA_REQUIRED_APPROVALS"] = "2"
    tokens = {name: cli.ok("approvers", "add", name).stdout.strip() for name in ("amy", "ben")}
    drafts = dict(_draft(cli) for _ in range(4))
    server = serve(cli)

    def approve(name: str, thread: str) -> tuple[int, str]:
        with server.client(tokens[name]) as api:
            body = {"draft_id": drafts[thread], "note": f"{name} read {thread}"}
            response = api.post(f"/api/threads/{thread}/approve", json=body)
            return response.status_code, response.json().get("status") or response.text

    with ThreadPoolExecutor(max_workers=4) as pool:
        first = list(pool.map(lambda t: approve("amy", t), drafts))
        assert first == [(200, "awaiting_approval")] * 4
        time.sleep(QUIET_SECONDS + 0.05)  # the copy of amy's notes starts about now
        second = list(pool.map(lambda t: approve("ben", t), drafts))
    assert second == [(200, "published")] * 4
    expected = {_decision_id("approve", t, d, by) for t, d in drafts.items() for by in ("amy", "ben")}
    deadline = time.monotonic() + 60
    while len(memories := _memories(cli)) < len(expected) + len(drafts) and time.monotonic() < deadline:
        time.sleep(0.2)
    ids = [m["id"] for m in memories]
    assert len(ids) == len(set(ids)) and expected <= set(ids)
    assert [m["kind"] for m in memories].count("report") == len(drafts) == len(cli.archive_files())


def test_copies_that_meet_a_store_outage_keep_one_retry_waiting_not_one_each(tmp_path: Path):
    """A server's copies that meet an outage (its checkpointer's Redis down), one after each refused
    decision: each says so and asks to try again, but one retry waits at a time, later after each
    failure, instead of a chain of retries per refused decision for as long as the outage lasts."""
    import threading

    from market_analyst.settings import Settings
    from market_analyst.workflow.memory_outbox import RETRY_SECONDS, Afterwards

    env = {
        "MA_DATA_DIR": str(tmp_path / "data"),
        "MA_CHECKPOINTER": "redis",
        "REDIS_URL": "redis://127.0.0.1:9/0",
    }
    later = Afterwards(Settings.load(env, dotenv=None))
    before = {t for t in threading.enumerate() if isinstance(t, threading.Timer)}
    try:
        for _ in range(4):  # four refused decisions, each asking for a copy once it has answered
            later.soon()
            later.wait()
        retries = [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t not in before]
        assert len(retries) == 1, retries
        assert retries[0].interval == RETRY_SECONDS  # the first retry's delay: no copy has finished since
    finally:
        for timer in threading.enumerate():
            if isinstance(timer, threading.Timer) and timer not in before:
                timer.cancel()
