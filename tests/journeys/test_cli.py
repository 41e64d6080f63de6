"""The real CLI in real processes: the analyst's and approver's journeys against each real
checkpointer (PostgreSQL and Redis), and every bad input the core names (one line on stderr,
non-zero exit, no traceback), which does not depend on the store and runs on PostgreSQL only."""

from __future__ import annotations

import json

import pytest

from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id


@both_backends
def test_analyze_then_approve_from_a_second_process(cli: Cli):
    analyzed = cli.ok("analyze", "NVDA")
    first_line = analyzed.stdout.splitlines()[0]
    assert first_line.startswith("Thread ") and "awaiting approval" in first_line
    thread_id = first_line.split()[1].rstrip(":")
    assert f"market-analyst approve {thread_id}" in analyzed.stdout
    assert "Recommendation:" in analyzed.stdout and "bundled snapshot, as of 2025-02-14" in analyzed.stdout

    before = cli.ok("status", thread_id, "--json").json()
    assert before["status"] == "awaiting_approval" and before["pending_node"] == "human_review"
    assert before["publication"] is None

    approved = cli.ok("approve", thread_id, "--user", "bob", "--note", "ok")
    assert "archive key" in approved.stdout

    after = cli.ok("status", thread_id, "--json").json()
    assert after["status"] == "published" and after["next"] == []
    key = after["publication"]["key"]
    assert key in cli.ok("status", thread_id).stdout
    files = list((cli.data_dir / "reports").glob("*.json"))
    assert [f.stem for f in files] == [key]
    document = json.loads(files[0].read_text())
    assert "bundled snapshot, as of 2025-02-14" in document["markdown"]
    assert document["approved_by"] == "bob" and document["approval_note"] == "ok"
    listed = cli.ok("reports", "list", "--json").json()
    assert [r["key"] for r in listed] == [key]
    assert "bundled snapshot, as of 2025-02-14" in cli.ok("reports", "show", key).stdout


def test_analyze_json_has_the_thread_and_its_draft(cli: Cli):
    data = cli.ok("analyze", "MSFT", "--json", "--question", "Is it a buy?").json()
    assert data["thread_id"] and data["pending_node"] == "human_review"
    draft = data["draft"]
    for field in ("recommendation", "confidence", "figures", "as_of", "data_source"):
        assert field in draft, field
    assert draft["as_of"] == "2021-03-31"
    assert draft["data_source"] == "bundled snapshot, as of 2021-03-31"
    assert draft["recommendation"] in ("buy", "hold", "sell")
    assert draft["question"] == "Is it a buy?"


@both_backends
def test_approving_twice_publishes_once(cli: Cli):
    thread_id = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]
    cli.ok("approve", thread_id)
    again = cli.fails("approve", thread_id)
    key = cli.ok("status", thread_id, "--json").json()["publication"]["key"]
    assert "already published" in again.stderr and key in again.stderr
    assert len(list((cli.data_dir / "reports").glob("*.json"))) == 1


@both_backends
def test_reject_ends_the_run_and_publishes_nothing(cli: Cli):
    thread_id = cli.ok("analyze", "NFLX", "--json").json()["thread_id"]
    cli.ok("reject", thread_id, "--reason", "too risky for now")
    status = cli.ok("status", thread_id, "--json").json()
    assert status["status"] == "rejected" and status["approval"]["note"] == "too risky for now"
    refused = cli.fails("approve", thread_id)
    assert "rejected" in refused.stderr
    assert not list((cli.data_dir / "reports").glob("*.json"))


@both_backends
def test_analyze_with_an_existing_thread_id_refuses(cli: Cli):
    mine = unique_id("mine")
    cli.ok("analyze", "NVDA", "--thread-id", mine)
    refused = cli.fails("analyze", "MSFT", "--thread-id", mine)
    assert f"status {mine}" in refused.stderr and f"resume {mine}" in refused.stderr
    assert cli.ok("status", mine, "--json").json()["ticker"] == "NVDA"


def test_same_input_same_draft(cli: Cli):
    a = cli.ok("analyze", "NVDA", "--json", "--user", "ann").json()
    b = cli.ok("analyze", "NVDA", "--json", "--user", "ann").json()
    assert a["thread_id"] != b["thread_id"]
    assert a["draft"] == b["draft"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("analyze", "ZZZZ"), "no data for ticker ZZZZ"),
        (("analyze", "../x"), "malformed ticker"),
        (("analyze", ""), "ticker is empty"),
        (("analyze", "A" * 40), "malformed ticker"),
        (("approve", "no-such-thread"), "unknown thread no-such-thread"),
        (("status", "no-such-thread"), "unknown thread no-such-thread"),
        (("reject", "some-thread"), "--reason"),
        (("analyze", "NVDA", "--durability", "sometimes"), "--durability"),
        (("analyze", "NVDA", "--user", "a b"), "invalid user ID"),
        (("analyze", "NVDA", "--user", ""), "invalid user ID"),
        (("approve", "../../etc"), "invalid thread ID"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(cli: Cli, args: tuple[str, ...], needle: str):
    result = cli.fails(*args)
    assert needle in result.stderr


@both_backends
def test_reject_with_a_blank_reason_is_refused(cli: Cli):
    thread_id = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]
    assert "needs a reason" in cli.fails("reject", thread_id, "--reason", "  ").stderr
    assert cli.ok("status", thread_id, "--json").json()["status"] == "awaiting_approval"


def test_unreachable_postgres_names_host_and_port_but_not_the_password(cli: Cli):
    url = "postgresql://analyst:hunter2secret@127.0.0.1:9/markets"
    result = cli.fails("analyze", "NVDA", extra_env={"POSTGRES_URL": url})
    assert "127.0.0.1:9" in result.stderr
    assert "hunter2secret" not in result.stderr
    assert "docker compose" in result.stderr


@both_backends
def test_bad_input_writes_no_state(cli: Cli):
    bad = unique_id("bad")
    cli.fails("analyze", "ZZZZ", "--thread-id", bad)
    assert f"unknown thread {bad}" in cli.fails("status", bad).stderr


def test_every_command_has_help(cli: Cli):
    for command in (
        ["analyze"],
        ["approve"],
        ["reject"],
        ["revise"],
        ["resume"],
        ["status"],
        ["threads"],
        ["reports", "list"],
        ["reports", "show"],
    ):
        assert "Usage" in cli.ok(*command, "--help").stdout


@both_backends
def test_revise_drafts_again_and_the_approval_binds_to_the_new_draft(cli: Cli):
    thread = unique_id("revise")
    first = cli.ok("analyze", "NVDA", "--thread-id", thread, "--json").json()
    revised = cli.ok("revise", thread, "--feedback", "say more about the drawdown", "--json").json()
    assert revised["status"] == "awaiting_approval" and revised["pending_node"] == "human_review"
    assert revised["draft"]["revision"] == 2
    assert revised["draft"]["feedback"] == ["say more about the drawdown"]
    assert "say more about the drawdown" in revised["draft"]["markdown"]
    assert revised["draft"]["draft_id"] != first["draft"]["draft_id"]
    cli.ok("approve", thread, "--user", "bob")
    status = cli.ok("status", thread, "--json").json()
    assert status["approval"]["draft_id"] == revised["draft"]["draft_id"]
    [path] = (cli.data_dir / "reports").glob("*.json")
    document = json.loads(path.read_text())
    assert document["draft_id"] == revised["draft"]["draft_id"] and document["report"]["revision"] == 2
    assert "already published" in cli.fails("revise", thread, "--feedback", "more").stderr


@both_backends
def test_threads_pending_lists_only_runs_at_the_gate(cli: Cli):
    waiting, done = unique_id("waiting"), unique_id("done")
    cli.ok("analyze", "NVDA", "--thread-id", waiting)
    cli.ok("analyze", "MSFT", "--thread-id", done)
    cli.ok("approve", done)
    pending = {t["thread_id"] for t in cli.ok("threads", "--pending", "--json").json()}
    every = {t["thread_id"]: t["status"] for t in cli.ok("threads", "--json").json()}
    assert waiting in pending and done not in pending
    assert every[waiting] == "awaiting_approval" and every[done] == "published"
    assert waiting in cli.ok("threads", "--pending").stdout
