"""One model turn of the LLM analyst's agent loop, and where the loop goes next.

A turn sends the conversation so far to the model, which either calls a data tool (the graph then
runs it in `tools` and comes back) or submits its analysis. A submission is accepted only if every
number in its prose is one the facts or the tool results contain; otherwise the model is told which
numbers and asked again. After `max_steps` turns the model may only submit; an unusable last answer
stops the run (it stays in progress: `resume` asks again).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.types import Send
from pydantic import ValidationError

from market_analyst.analyst.grounding import Facts, figure_facts, tool_fact
from market_analyst.analyst.llm import ANALYST_VERSION, ANSWER_TOOL, LLMAnalysis
from market_analyst.errors import ServiceUnavailable
from market_analyst.nodes.tools import TOOL_NAMES, TOOLS
from market_analyst.ports import Deps
from market_analyst.state import AnalystState, Profile

SYSTEM = (
    "You are a careful equity analyst. Judge the stock for the investor profile given, from the facts "
    "given and what the tools return: figures over other windows, the S&P 500 comparison, the price on "
    "a date, the deepest falls, the profile. Cite numbers only as they appear in the facts or in tool "
    "results; write no other number (no targets, no years, no counts). When you are done, call "
    f"{ANSWER_TOOL} with a recommendation (buy, hold or sell), a confidence between 0 and 1, a summary "
    "of a few sentences, up to ten short risk factors and, for each reviewer feedback item, what your "
    "draft changed in response (acted=false when it changed nothing)."
)


def _opening(state: AnalystState, profile: Profile, facts: list[str]) -> list[Any]:
    lines = [
        f"Ticker: {state['ticker']}",
        f"Question: {state.get('question') or 'Buy, hold or sell?'}",
        f"Investor profile: {profile.risk_tolerance} risk tolerance, {profile.horizon} horizon",
        "Facts:",
        *(f"- {fact}" for fact in facts),
    ]
    feedback = list(state.get("feedback") or [])
    if feedback:
        lines += ["Reviewer feedback on earlier drafts (answer each item in feedback_responses):"]
        lines += [f"- {item}" for item in feedback]
    return [SystemMessage(SYSTEM), HumanMessage("\n".join(lines))]


def tool_facts(messages: list[Any]) -> list[str]:
    """Each tool result in the conversation as a fact line."""
    calls = {c["id"]: c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    facts = []
    for message in messages:
        call = calls.get(getattr(message, "tool_call_id", None) or "")
        if isinstance(message, ToolMessage) and call is not None and call["name"] in TOOL_NAMES:
            facts.append(tool_fact(call["name"], call.get("args") or {}, message.content))
    return facts


def _feedback_notes(feedback: list[str], answer: LLMAnalysis) -> list[dict[str, Any]]:
    by_text = {r.feedback.strip(): r for r in answer.feedback_responses}
    notes = []
    for index, item in enumerate(feedback):
        response = by_text.get(item.strip())
        if response is None and len(answer.feedback_responses) == len(feedback):
            response = answer.feedback_responses[index]
        if response is None:
            notes.append(
                {"feedback": item, "response": "the analyst did not answer this item", "acted": False}
            )
        else:
            notes.append({"feedback": item, "response": response.change, "acted": response.acted})
    return notes


def _judge(arguments: dict[str, Any], facts: Facts) -> tuple[LLMAnalysis | None, str]:
    """The answer if it fits the schema and cites only grounded numbers, else why not."""
    try:
        answer = LLMAnalysis.model_validate(arguments)
    except ValidationError as exc:
        return None, f"the answer did not fit the schema ({' '.join(str(exc).split())[:200]})"
    unsupported = [n for text in answer.texts() for n in facts.ungrounded(text)]
    if unsupported:
        return None, f"the answer cited {', '.join(unsupported[:6])}, which no fact or tool result contains"
    return answer, ""


def agent_turn(state: AnalystState, deps: Deps, profile: Profile) -> dict[str, Any]:
    """One model turn: the model's message, and the analysis once an answer is accepted."""
    assert deps.model is not None
    market = state["market"]
    baseline = deps.analyst.analyse(state["ticker"], market["figures"], profile, [])
    facts = figure_facts(market["figures"], market["as_of"]) + [
        f"the built-in rules' framing: {baseline['framing']}"
    ]
    history = list(state.get("messages") or [])
    new = [] if history else _opening(state, profile, facts)
    steps = int(state.get("agent_steps") or 0) + 1
    answer_now = steps >= deps.max_steps
    reply = deps.model.respond(history + new, TOOLS, answer_now=answer_now)
    new.append(reply)
    update: dict[str, Any] = {"messages": new, "agent_steps": steps}
    submitted = [c for c in reply.tool_calls if c["name"] == ANSWER_TOOL]
    if any(c["name"] != ANSWER_TOOL for c in reply.tool_calls):
        # Tools first: an answer sent alongside is set aside until the model has read their results.
        new += [
            ToolMessage("not taken: read the tool results, then submit", tool_call_id=c["id"])
            for c in submitted
        ]
        return update
    if not submitted:
        problem = "the model neither called a tool nor submitted an analysis"
        new.append(HumanMessage(f"Call a tool, or {ANSWER_TOOL} with your analysis."))
    else:
        all_facts = facts + tool_facts(history + new)
        answer, problem = _judge(submitted[0]["args"], Facts.of(all_facts, market["as_of"]))
        if answer is not None:
            new.append(ToolMessage("accepted", tool_call_id=submitted[0]["id"]))
            update["analysis"] = _analysis(
                answer, baseline, deps, all_facts, list(state.get("feedback") or [])
            )
            return update
        new.append(ToolMessage(f"Refused: {problem}. Answer again.", tool_call_id=submitted[0]["id"]))
    if answer_now:
        raise ServiceUnavailable(
            f"the LLM analyst ({deps.model.name}) gave no usable answer in {steps} turns: {problem}"
        )
    return update


def _analysis(
    answer: LLMAnalysis, baseline: dict[str, Any], deps: Deps, facts: list[str], feedback: list[str]
) -> dict[str, Any]:
    assert deps.model is not None
    return {
        "recommendation": answer.recommendation,
        "confidence": round(answer.confidence, 2),
        "score": baseline["score"],
        "summary": answer.summary,
        "risk_factors": list(answer.risk_factors),
        "analyst": {"kind": "llm", "name": deps.model.name, "version": ANALYST_VERSION},
        "framing": baseline["framing"],
        "facts": facts,
        "feedback_notes": _feedback_notes(feedback, answer),
    }


def next_step(state: AnalystState) -> Any:
    """After `analyze`: draft once an analysis is accepted; run the model's tool calls, each as a task
    of its own; otherwise ask the model again."""
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
