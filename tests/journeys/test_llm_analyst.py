"""The LLM analyst through the real CLI, against a local server that speaks chat completions: an
agent loop of model turns and tool calls, grounding, revise, and failures that say what to do."""

from __future__ import annotations

import json
import time

from tests.support.chat_server import ChatServer
from tests.support.cli import Cli, unique_id

GOOD = {
    "recommendation": "hold",
    "confidence": 0.6,
    "summary": "NVDA rose 92.6% over a year with volatility of about 57%; RSI(14) of 56.6 and an up trend.",
    "risk_factors": [
        "volatility of 56.8% is high for this profile",
        "the price is 7.1% below its 52-week high",
    ],
}


def test_the_model_answers_from_the_computed_facts(cli: Cli):
    with ChatServer([{"answer": GOOD}]) as server:
        draft = cli.ok("analyze", "NVDA", "--json", extra_env=server.env()).json()["draft"]
    assert draft["analyst"] == {"kind": "llm", "name": "test-model", "version": "3"}
    assert draft["recommendation"] == "hold" and draft["confidence"] == 0.6
    assert draft["summary"] == GOOD["summary"]
    assert "Analyst: test-model" in draft["markdown"]
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    prompt = server.messages(0)
    # One format: returns as percentages, volatility and drawdown unsigned, no raw fractions.
    assert "return over 1Y: +92.56%" in prompt and "annualised volatility over 1Y: 56.83%" in prompt
    assert "last close (2025-02-14): 138.85" in prompt and "0.9256" not in prompt
    offered = {t["function"]["name"] for t in request["body"]["tools"]}
    assert {"figures_over_window", "benchmark_comparison", "price_on", "drawdown_episodes"} <= offered
    assert "submit_analysis" in offered


def test_two_tool_calls_then_the_answer_and_the_tool_results_become_facts(cli: Cli):
    answer = dict(GOOD, summary="Over 3M NVDA fell 6.4%; its deepest fall in five years was 66.3%.")
    script = [
        {"call": "figures_over_window", "arguments": {"window": "3M"}},
        {"call": "drawdown_episodes", "arguments": {"count": 2}},
        {"answer": answer},
    ]
    with ChatServer(script) as server:
        draft = cli.ok("analyze", "NVDA", "--json", extra_env=server.env()).json()["draft"]
        assert len(server.requests) == 3 and server.violations == []
        results = [
            json.loads(m["content"]) for m in server.requests[2]["body"]["messages"] if m["role"] == "tool"
        ]
    # Each tool's result went back to the model.
    assert results[0]["return_pct"] == -6.3594 and results[1][0]["depth_pct"] == 66.3351
    assert draft["summary"] == answer["summary"]  # 66.3 is grounded by a tool result, not the figures
    tool_facts = [f for f in draft["facts"] if f.startswith(("figures_over_window", "drawdown_episodes"))]
    assert len(tool_facts) == 2 and 'window="3M"' in tool_facts[0] and "66.3351" in tool_facts[1]


def test_an_answer_citing_numbers_not_in_the_facts_is_asked_for_again(cli: Cli):
    invented = dict(GOOD, summary="NVDA will reach 250 by 2026.")
    with ChatServer([{"answer": invented}, {"answer": GOOD}]) as server:
        draft = cli.ok("analyze", "NVDA", "--json", extra_env=server.env()).json()["draft"]
        assert len(server.requests) == 2 and server.violations == []
        assert "Refused: the answer cited 250, 2026" in server.messages(1)
    assert draft["summary"] == GOOD["summary"]


def test_server_errors_are_retried_with_backoff(cli: Cli):
    with ChatServer([{"status": 500}, {"answer": GOOD}]) as server:
        draft = cli.ok("analyze", "NVDA", "--json", extra_env=server.env()).json()["draft"]
        assert len(server.requests) == 2
    assert draft["analyst"]["kind"] == "llm"


def test_no_usable_answer_in_the_allowed_turns_stops_with_the_thread_and_resume_finishes(cli: Cli):
    thread = unique_id("llm")
    invented = dict(GOOD, risk_factors=["a 987% fall is likely"])
    env = {"MA_LLM_MAX_STEPS": "2"}
    with ChatServer([{"answer": invented}, {"answer": invented}]) as server:
        failed = cli.fails("analyze", "NVDA", "--thread-id", thread, extra_env=server.env() | env)
        assert len(server.requests) == 2
        assert '"tool_choice"' in json.dumps(server.requests[1]["body"])  # the last turn must answer
    assert failed.returncode == 69
    assert "no usable answer in 2 turns" in failed.stderr and "987" in failed.stderr
    assert f"thread {thread} is in progress" in failed.stderr
    assert f"market-analyst resume {thread}" in failed.stderr
    assert cli.ok("status", thread, "--json").json()["status"] == "in_progress"
    with ChatServer([{"answer": GOOD}]) as server:
        resumed = cli.ok("resume", thread, "--json", extra_env=server.env() | env).json()
    assert resumed["status"] == "awaiting_approval"


def test_rules_stay_the_default_without_a_key(cli: Cli):
    draft = cli.ok("analyze", "NVDA", "--json").json()["draft"]
    assert draft["analyst"]["kind"] == "rules"
    assert "OPENAI_API_KEY" in cli.fails("analyze", "NVDA", extra_env={"MA_ANALYST": "llm"}).stderr
    # Commands that only read a thread do not need the analyst's key.
    thread_id = cli.ok("analyze", "MSFT", "--json").json()["thread_id"]
    assert cli.ok("status", thread_id, extra_env={"MA_ANALYST": "llm"}).returncode == 0


def test_revise_asks_the_model_again_with_every_feedback_item(cli: Cli):
    thread = unique_id("llm-revise")
    response = {
        "feedback": "mention the 52-week high",
        "change": "the summary now says the price is 7.1% below its 52-week high",
        "acted": True,
    }
    revised = dict(GOOD, summary=GOOD["summary"] + " It trades 7.1% below its 52-week high.")
    with ChatServer([{"answer": GOOD}, {"answer": revised | {"feedback_responses": [response]}}]) as server:
        cli.ok("analyze", "NVDA", "--thread-id", thread, extra_env=server.env())
        out = cli.ok(
            "revise", thread, "--feedback", "mention the 52-week high", "--json", extra_env=server.env()
        )
        assert len(server.requests) == 2 and server.violations == []
        assert "mention the 52-week high" in server.messages(1)  # the model was asked again, with it
    data = out.json()
    assert data["revision"] == 2 and data["feedback"] == "mention the 52-week high"
    [note] = data["draft"]["feedback_notes"]
    assert note == {"feedback": response["feedback"], "response": response["change"], "acted": True}
    assert "(addressed: the summary now says the price is 7.1% below" in data["draft"]["markdown"]
    assert data["changes"]["lines_added"] >= 1


def test_a_model_that_keeps_failing_ends_within_attempts_times_timeout(cli: Cli):
    thread = unique_id("llm-down")
    env = {"MA_LLM_TIMEOUT": "2", "MA_LLM_ATTEMPTS": "3"}
    with ChatServer([{"answer": GOOD}]) as server:  # the same command with a model that answers at once
        started = time.monotonic()
        cli.ok("analyze", "NVDA", extra_env=server.env() | env)
        answered = time.monotonic() - started
    with ChatServer([{"hang": 4}] * 3) as server:
        started = time.monotonic()
        hung = cli.run("analyze", "NVDA", "--thread-id", thread, "--json", extra_env=server.env() | env)
        waited = time.monotonic() - started - answered
        assert len(server.requests) == 3
    # Three attempts of two seconds, and no pause after a request that timed out (2 s of slack for load).
    assert waited < 3 * 2 + 2, (waited, answered)
    assert hung.returncode == 69 and len(hung.stderr.strip().splitlines()) == 1
    assert f"market-analyst resume {thread}" in hung.stderr and "did not answer" in hung.stderr
    assert hung.json() == {"thread_id": thread, "status": "in_progress", "error": hung.stderr.strip()[7:]}
    with ChatServer([{"status": 500}] * 3) as server:
        down = cli.fails("resume", thread, extra_env=server.env() | env)
    assert down.returncode == 69 and f"market-analyst resume {thread}" in down.stderr
    with ChatServer([{"answer": GOOD}]) as server:  # the server is back
        assert (
            cli.ok("resume", thread, "--json", extra_env=server.env() | env).json()["status"]
            == "awaiting_approval"
        )
