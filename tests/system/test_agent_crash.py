"""A process killed in the middle of the LLM analyst's loop resumes without asking the model again
for a turn that had finished, nor running again a tool call that had: each is a checkpointed step.
A real SIGKILL, in `sync` mode, on both checkpointers; the model is the scripted local server."""

from __future__ import annotations

import pytest

from tests.support.chat_server import ChatServer
from tests.support.cli import Cli, unique_id
from tests.support.crashkit import Harness
from tests.support.retry import retry_while_busy

ANSWER = {
    "recommendation": "hold",
    "confidence": 0.55,
    "summary": "Over 3M NVDA fell 6.4%, and its deepest fall in five years was 66.3%.",
    "risk_factors": ["volatility of 56.8% is high"],
}
SCRIPT = [
    {"call": "figures_over_window", "arguments": {"window": "3M"}},
    {"call": "drawdown_episodes", "arguments": {"count": 2}},
    {"answer": ANSWER},
]


@pytest.mark.parametrize("cli", ["postgres", "redis"], indirect=True)
def test_a_kill_between_two_tool_calls_repeats_no_finished_turn_or_call(cli: Cli, harness: Harness):
    thread = unique_id("agent-crash")
    with ChatServer(SCRIPT) as server:
        env = cli.env | server.env() | {"MA_DURABILITY": "sync", "MA_LEASE_TTL_SECONDS": "2"}
        # The first model turn asked for a tool, the tool ran, and both were saved; the process dies
        # as the second turn starts, between the two tool calls.
        killed = harness.run(["analyze", "NVDA", "--thread-id", thread], env, kill_point="before:analyze#2")
        assert killed.killed and killed.nodes.count("analyze") == 1
        assert len(server.requests) == 1
        status = cli.ok("status", thread, "--json", extra_env=env).json()
        assert status["status"] == "in_progress" and status["next"] == ["analyze"]

        resumed = retry_while_busy(lambda: harness.run(["resume", thread, "--json"], env)).check()
        assert resumed.json()["status"] == "awaiting_approval"
        # Two more turns after the kill, no third: the finished one was not asked for again.
        assert len(server.requests) == 3
        last = server.requests[2]["body"]["messages"]
        tool_results = [m for m in last if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_results] == ["call_1", "call_2"]  # each tool ran once
        assert sum(1 for m in last if m["role"] == "assistant") == 2

    draft = cli.ok("status", thread, "--json", extra_env=env).json()["draft"]
    assert draft["summary"] == ANSWER["summary"]
    cli.ok("approve", thread, extra_env=env)
    assert len(cli.archive_files()) == 1
