"""analyze: the analyst's judgement of the figures for the profile (and any reviewer feedback).

With the built-in rules this is one step. With the LLM analyst it is one model turn of an agent loop
(`nodes/agent/`): the graph comes back here after each tool call until the model submits an
answer that every number of which the facts support.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from market_analyst.analyst.grounding import figure_facts
from market_analyst.context import Deps
from market_analyst.nodes.agent import agent_turn
from market_analyst.state import AnalystState, Profile, ProfileUsed

NOT_ACTED = (
    "the built-in rules compute the same figures; use the LLM analyst or the revise options "
    "(--question, --risk-tolerance, --horizon)"
)

# What the built-in rules did with the memories recall found: nothing, and the draft says so.
MEMORIES_NOT_ACTED = (
    "Recorded, not acted on: the built-in rules compute the same figures and the same recommendation "
    "whatever earlier notes say; they are listed for the reviewer, not followed."
)


def profile_for_run(state: AnalystState) -> Profile:
    """The profile the analysis uses: the one read at the start, with this thread's revise options."""
    profile = ProfileUsed.model_validate(state["profile"]).profile
    return profile.model_copy(update=dict(state.get("overrides") or {}))


def analyze(state: AnalystState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """One step of analysis: the rules' whole judgement, or one turn of the LLM analyst."""
    deps = runtime.context
    profile = profile_for_run(state)
    feedback = list(state.get("feedback") or [])
    if deps.model is not None:
        return agent_turn(state, deps, profile)
    analysis = deps.analyst.analyse(state["ticker"], state["market"]["figures"], profile, feedback)
    analysis["facts"] = figure_facts(state["market"]["figures"], state["market"]["as_of"])
    analysis["feedback_notes"] = [
        {"feedback": item, "response": NOT_ACTED, "acted": False} for item in feedback
    ]
    if state.get("recalled"):
        analysis["memory_response"] = MEMORIES_NOT_ACTED
    return {"analysis": analysis}
