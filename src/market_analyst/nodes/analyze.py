"""analyze: apply the analyst to the figures and the profile."""

from __future__ import annotations

from typing import Any

from market_analyst.deps import Analyst
from market_analyst.state import AnalystState, ProfileUsed


def analyze(state: AnalystState, *, analyst: Analyst) -> dict[str, Any]:
    """The analyst's judgement of the figures for the profile in the state (and any feedback)."""
    profile = ProfileUsed.model_validate(state["profile"]).profile
    figures = state["market"]["figures"]
    return {"analysis": analyst.analyse(state["ticker"], figures, profile, list(state.get("feedback") or []))}
