"""The LLM analyst's turn: one model turn of the agent loop (`agent_turn`, run by `analyze`), and
where the loop goes next (`next_step`). The rules the turn keeps are the package's (`nodes/agent/`)."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Send

from market_analyst.analyst.grounding import Facts, figure_facts
from market_analyst.analyst.llm import ANALYST_VERSION, LLMAnalysis
from market_analyst.context import Deps
from market_analyst.errors import ServiceUnavailable
from market_analyst.nodes.agent.conversation import (
    MAX_ARGUMENT_CHARS,
    MAX_CALLS_PER_TURN,
    MAX_PROMPT_CHARS,
    prompt_chars,
    sendable,
    tidy_reply,
    without_arguments,
)
from market_analyst.nodes.agent.judge import feedback_notes, judge, memory_facts, tool_facts
from market_analyst.nodes.tools import TOOL_NAMES, TOOLS
from market_analyst.prompts import (
    ACCEPTED,
    ANSWER_TOOL,
    NUDGE,
    ONE_ANSWER_PER_TURN,
    TOOLS_FIRST,
    no_tool_now,
    opening,
    refused,
    too_many_calls,
)
from market_analyst.state import AnalystState, Profile

MEMORIES_GIVEN = (
    "Given to the LLM analyst as notes from earlier runs, fenced as data, not instructions; the gate "
    "and the approval rule never read them."
)


def agent_turn(state: AnalystState, deps: Deps, profile: Profile) -> dict[str, Any]:
    """One model turn: the model's message with a reply to every call that will not run, and the
    analysis once an answer is accepted."""
    assert deps.model is not None
    market = state["market"]
    baseline = deps.analyst.analyse(state["ticker"], market["figures"], profile, [])
    facts = figure_facts(market["figures"], market["as_of"]) + [
        f"the built-in rules' framing: {baseline['framing']}"
    ]
    history = list(state.get("messages") or [])
    new = [] if history else opening(state, profile, facts)
    steps = int(state.get("agent_steps") or 0) + 1
    over_cap = prompt_chars(history + new) > MAX_PROMPT_CHARS
    answer_now = steps >= deps.max_steps or over_cap
    reply, problems = tidy_reply(
        deps.model.respond(sendable(history + new), TOOLS, answer_now=answer_now), history, steps
    )
    new.append(reply)
    reply_at = len(new) - 1
    update: dict[str, Any] = {"messages": new, "agent_steps": steps}
    runnable = [c for c in reply.tool_calls if c["id"] not in problems and c["name"] in TOOL_NAMES]
    if answer_now:
        for call in runnable:
            problems[str(call["id"])] = no_tool_now(
                over_cap=over_cap, max_prompt_chars=MAX_PROMPT_CHARS, max_steps=deps.max_steps
            )
    else:
        for call in runnable[MAX_CALLS_PER_TURN:]:
            problems[str(call["id"])] = too_many_calls(MAX_CALLS_PER_TURN)
    runs = [c for c in runnable if c["id"] not in problems]
    submitted = [c for c in reply.tool_calls if c["id"] not in problems and c["name"] == ANSWER_TOOL]
    for extra in submitted[1:]:
        problems[str(extra["id"])] = ONE_ANSWER_PER_TURN
    if runs and submitted:
        # Tools first: an answer sent alongside is set aside until the model has read their results.
        problems[str(submitted[0]["id"])] = TOOLS_FIRST
    # A call that does not run keeps no arguments: the conversation stays small, and valid.
    new[reply_at] = reply = without_arguments(reply, set(problems))
    new += [ToolMessage(text, tool_call_id=call_id, status="error") for call_id, text in problems.items()]
    if runs:
        return update
    if submitted:
        all_facts = facts + memory_facts(state) + tool_facts(history + new)
        answer, problem = judge(submitted[0]["args"], Facts.of(all_facts, market["as_of"]))
        if answer is not None:
            new.append(ToolMessage(ACCEPTED, tool_call_id=submitted[0]["id"]))
            update["analysis"] = _analysis(answer, baseline, deps, all_facts, state)
            return update
        if len(json.dumps(submitted[0]["args"])) > MAX_ARGUMENT_CHARS:
            # A refused answer that long is not kept: the refusal says what to shorten.
            new[reply_at] = reply = without_arguments(reply, {str(submitted[0]["id"])})
        new.append(ToolMessage(refused(problem), tool_call_id=submitted[0]["id"], status="error"))
    elif reply.tool_calls:
        problem = "no call the model made could run: " + "; ".join(problems.values())[:300]
    else:
        problem = "the model neither called a tool nor submitted an analysis"
        new.append(HumanMessage(NUDGE))
    if answer_now:
        raise ServiceUnavailable(
            f"the LLM analyst ({deps.model.name}) gave no usable answer in {steps} turns: {problem}"
        )
    return update


def _analysis(
    answer: LLMAnalysis, baseline: dict[str, Any], deps: Deps, facts: list[str], state: AnalystState
) -> dict[str, Any]:
    assert deps.model is not None
    feedback = list(state.get("feedback") or [])
    return {
        "recommendation": answer.recommendation,
        "confidence": round(answer.confidence, 2),
        "score": baseline["score"],
        "summary": answer.summary,
        "risk_factors": list(answer.risk_factors),
        "analyst": {"kind": "llm", "name": deps.model.name, "version": ANALYST_VERSION},
        "framing": baseline["framing"],
        "facts": facts,
        "feedback_notes": feedback_notes(feedback, answer, dict(state.get("draft") or {})),
        "memory_response": MEMORIES_GIVEN if state.get("recalled") else "",
    }


def next_step(state: AnalystState) -> Any:
    """After `analyze`: draft once an analysis is accepted; run the model's tool calls that have no
    reply yet, each as a task of its own; otherwise ask the model again."""
    if state.get("analysis") is not None:
        return "draft_report"
    messages = state.get("messages") or []
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    pending = [
        call
        for call in (last.tool_calls if last is not None else [])
        if call["name"] in TOOL_NAMES and call["id"] not in answered
    ]
    if pending:
        return [Send("tools", [call]) for call in pending]
    return "analyze"
