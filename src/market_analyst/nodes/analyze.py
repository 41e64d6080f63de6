"""analyze: apply the analyst to the figures and the profile."""

from __future__ import annotations

from typing import Any

from market_analyst.analyst import rules
from market_analyst.state import AnalystState, ProfileUsed


def analyze(state: AnalystState) -> dict[str, Any]:
    """The built-in rules: deterministic, and dependent on the profile in the state."""
    profile = ProfileUsed.model_validate(state["profile"]).profile
    return {"analysis": rules.analyse(state["market"]["figures"], profile)}
