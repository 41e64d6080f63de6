"""Exactly-once publishing and one writer per thread, proven with real processes that die."""

from __future__ import annotations

from market_analyst.deps import open_checkpointer
from market_analyst.graph import build_graph
from market_analyst.settings import Settings
from tests.support.backends import both_backends
from tests.support.cli import Cli, Result, run_with_kill, unique_id
from tests.support.lease_holder import hold_lease
from tests.support.retry import retry_while_busy

FIXED_CLOCK = {"SOURCE_DATE_EPOCH": "1739577600"}  # 2025-02-15T00:00:00Z: approvals get the same time


def once_not_busy(cli: Cli, *args: str) -> Result:
    """Run a command that must succeed once a killed command's Redis lease has lived out its TTL."""
    result = retry_while_busy(lambda: cli.run(*args))
    assert result.returncode == 0, result.stderr
    return result


def reference_document(cli_factory, thread_id: str, ticker: str = "NVDA") -> bytes:
    """The document an uncrashed run writes for these inputs, in a store of its own."""
    ref = cli_factory()
    ref.env.update(FIXED_CLOCK)
    ref.ok("analyze", ticker, "--thread-id", thread_id, "--user", "ann")
    ref.ok("approve", thread_id, "--user", "bob")
    [path] = ref.archive_files()
    return path.read_bytes()


@both_backends
def test_publish_killed_after_the_archive_write_publishes_exactly_once(cli: Cli, fresh_cli):
    thread = unique_id("crash-publish")
    expected = reference_document(fresh_cli, thread)
    cli.env.update(FIXED_CLOCK | {"MA_LEASE_TTL_SECONDS": "2"})
    cli.ok("analyze", "NVDA", "--thread-id", thread, "--user", "ann")

    killed = run_with_kill(cli, "after-archive-write", "approve", thread, "--user", "bob")
    assert killed.returncode == -9, killed.stderr
    assert len(cli.archive_files()) == 1  # the write happened...
    status = cli.ok("status", thread, "--json").json()
    assert status["status"] == "approved_pending_publish"  # ...but the checkpoint did not
    assert status["approval"]["by"] == "bob"  # the approval survived the crash

    again = once_not_busy(cli, "approve", thread, "--user", "bob")
    assert "already held this operation's report" in again.stdout
    files = cli.archive_files()
    assert len(files) == 1
    assert files[0].read_bytes() == expected
    assert cli.ok("status", thread, "--json").json()["status"] == "published"
    assert "already published" in cli.fails("approve", thread).stderr


@both_backends
def test_resume_also_finishes_a_publish_killed_after_the_write(cli: Cli):
    cli.env["MA_LEASE_TTL_SECONDS"] = "2"
    thread = unique_id("crash-resume")
    cli.ok("analyze", "MSFT", "--thread-id", thread)
    assert run_with_kill(cli, "after-archive-write", "approve", thread).returncode == -9
    resumed = once_not_busy(cli, "resume", thread, "--json").json()
    assert resumed["status"] == "published"
    assert resumed["publication"]["created"] is False
    assert len(cli.archive_files()) == 1


def _history_is_linear(settings: Settings, thread_id: str) -> tuple[bool, int]:
    with open_checkpointer(settings) as backend:
        graph = build_graph(checkpointer=backend.saver)
        history = list(graph.get_state_history({"configurable": {"thread_id": thread_id}}))
    parents = [h.parent_config["configurable"]["checkpoint_id"] for h in history if h.parent_config]
    return len(parents) == len(set(parents)) and len(parents) == len(history) - 1, len(history)


@both_backends
def test_eight_concurrent_approvals_publish_once_without_forking_the_thread(cli: Cli):
    race = unique_id("race")
    cli.ok("analyze", "NVDA", "--thread-id", race)
    assert cli.harness is not None
    outcomes = cli.harness.run_together(
        [(["approve", race, "--user", f"approver{i}"], cli.env) for i in range(8)], cwd=cli.cwd, at_once=True
    )
    results = [(o.returncode, o.stdout, o.stderr) for o in outcomes]
    successes = [r for r in results if r[0] == 0]
    refusals = [r for r in results if r[0] != 0]
    assert len(successes) == 1, results
    assert len(refusals) == 7
    for code, _, err in refusals:
        assert code == 2 and "Traceback" not in err
        assert "is busy" in err or "already published" in err, err
    assert len(cli.archive_files()) == 1
    linear, count = _history_is_linear(Settings.load(environ=cli.env, dotenv=None), race)
    assert linear, "two writers forked the checkpoint chain"
    assert count >= 6


@both_backends
def test_a_busy_thread_refuses_a_second_command_and_changes_nothing(cli: Cli):
    cli.env["MA_LEASE_TTL_SECONDS"] = "2"  # on Redis, a killed holder's lease lasts this long
    held = unique_id("held")
    cli.ok("analyze", "NVDA", "--thread-id", held)
    before = cli.ok("status", held, "--json").json()
    # Hold the thread's lease from another process for the duration of the check.
    holder = hold_lease(cli.harness, held, cli.env)
    try:
        for args in (
            ("approve", held),
            ("reject", held, "--reason", "x"),
            ("resume", held),
            ("revise", held, "--feedback", "x"),
            ("analyze", "NVDA", "--thread-id", held),
        ):
            result = cli.fails(*args)
            assert f"thread {held} is busy" in result.stderr, result.stderr
        assert cli.ok("status", held, "--json").json() == before
    finally:
        holder.kill()
        holder.wait()
    # A lease held by a killed process is released: with its session (PostgreSQL) or its TTL (Redis).
    once_not_busy(cli, "approve", held)
    assert len(cli.archive_files()) == 1
