"""analyze: apply the analyst to the figures and the profile."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from market_analyst.ports import Deps
from market_analyst.state import AnalystState, ProfileUsed


def analyze(state: AnalystState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """The analyst's judgement of the figures for the profile in the state (and any feedback)."""
    profile = ProfileUsed.model_validate(state["profile"]).profile
    figures = state["market"]["figures"]
    feedback = list(state.get("feedback") or [])
    return {"analysis": runtime.context.analyst.analyse(state["ticker"], figures, profile, feedback)}
