"""The LLM analyst through the real CLI, against a local server that speaks chat completions."""

from __future__ import annotations

import json

from market_analyst.analyst.llm import LLMAnalysis, allowed_numbers, unsupported_numbers
from tests.support.chat_server import ChatServer
from tests.support.cli import Cli

GOOD = {
    "recommendation": "hold",
    "confidence": 0.6,
    "summary": "NVDA rose +92.6% over a year with volatility of +56.8%; the trend is up.",
    "risk_factors": ["volatility of +56.8% is high for this profile"],
}


def _llm_env(server: ChatServer) -> dict[str, str]:
    return {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": server.base_url, "MA_OPENAI_MODEL": "test-model"}


def test_the_model_writes_the_draft_from_the_computed_facts(cli: Cli):
    with ChatServer([{"arguments": GOOD}]) as server:
        draft = cli.ok("analyze", "NVDA", "--json", extra_env=_llm_env(server)).json()["draft"]
    assert draft["analyst"] == {"kind": "llm", "name": "test-model", "version": "1"}
    assert draft["recommendation"] == "hold" and draft["confidence"] == 0.6
    assert draft["summary"] == GOOD["summary"]
    assert "Analyst: test-model" in draft["markdown"]
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    prompt = json.dumps(request["body"]["messages"])
    assert "return_1y: +92.6%" in prompt and "price: 138.85" in prompt  # the figures went in as facts
    assert request["body"]["tools"][0]["function"]["name"] == "LLMAnalysis"


def test_an_answer_citing_numbers_not_in_the_facts_is_asked_for_again(cli: Cli):
    invented = dict(GOOD, summary="NVDA will reach 250 by 2026.")
    with ChatServer([{"arguments": invented}, {"arguments": GOOD}]) as server:
        draft = cli.ok("analyze", "NVDA", "--json", extra_env=_llm_env(server)).json()["draft"]
        assert len(server.requests) == 2
        retry = json.dumps(server.requests[1]["body"]["messages"])
    assert "250" in retry and "which no fact contains" in retry
    assert draft["summary"] == GOOD["summary"]


def test_server_errors_are_retried_with_backoff(cli: Cli):
    with ChatServer([{"status": 500}, {"arguments": GOOD}]) as server:
        draft = cli.ok("analyze", "NVDA", "--json", extra_env=_llm_env(server)).json()["draft"]
        assert len(server.requests) == 2
    assert draft["analyst"]["kind"] == "llm"


def test_no_usable_answer_is_one_line_and_the_run_can_resume(cli: Cli):
    invented = dict(GOOD, risk_factors=["a 987% fall is likely"])
    with ChatServer([{"arguments": invented}] * 3) as server:
        failed = cli.fails("analyze", "NVDA", "--thread-id", "llm-1", extra_env=_llm_env(server))
    assert "gave no usable answer in 3 tries" in failed.stderr and "987" in failed.stderr
    assert cli.ok("status", "llm-1", "--json").json()["status"] == "in_progress"
    with ChatServer([{"arguments": GOOD}]) as server:
        resumed = cli.ok("resume", "llm-1", "--json", extra_env=_llm_env(server)).json()
    assert resumed["status"] == "awaiting_approval"


def test_rules_stay_the_default_without_a_key(cli: Cli):
    draft = cli.ok("analyze", "NVDA", "--json").json()["draft"]
    assert draft["analyst"]["kind"] == "rules"
    assert "OPENAI_API_KEY" in cli.fails("analyze", "NVDA", extra_env={"MA_ANALYST": "llm"}).stderr
    # Commands that only read a thread do not need the analyst's key.
    thread_id = cli.ok("analyze", "MSFT", "--json").json()["thread_id"]
    assert cli.ok("status", thread_id, extra_env={"MA_ANALYST": "llm"}).returncode == 0


def test_number_check_accepts_the_facts_forms_and_nothing_else():
    allowed = allowed_numbers(["return_1y: +92.6%", "price: 138.85", "rsi_14: 56.5576"])
    answer = LLMAnalysis(
        recommendation="buy", confidence=0.5, summary="up 92.6% at 138.85, RSI 56.5576", risk_factors=[]
    )
    assert unsupported_numbers(answer, allowed) == []
    answer.summary = "up 93% at 139"
    assert unsupported_numbers(answer, allowed) == ["93", "139"]
