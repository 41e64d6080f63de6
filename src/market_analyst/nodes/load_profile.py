"""load_profile: read the user's stored risk profile, or fall back to stated defaults."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from market_analyst.ports import Deps, profile_in_use
from market_analyst.state import DEFAULT_USER, AnalystState


def load_profile(state: AnalystState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Keep a copy of the profile in the state, so the run is analysed with what it read here."""
    used = profile_in_use(runtime.context.profiles, state.get("user_id") or DEFAULT_USER)
    return {"profile": used.model_dump(mode="json")}
