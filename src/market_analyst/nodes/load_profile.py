"""load_profile: read the user's stored risk profile, or fall back to stated defaults."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from market_analyst.context import Deps
from market_analyst.ports import profile_in_use
from market_analyst.state import DEFAULT_USER, SCHEMA_VERSION, AnalystState


def load_profile(state: AnalystState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Keep a copy of the profile in the state, so the run is analysed with what it read here. A
    thread started without its schema and start time (LangGraph's server, whose input is narrower
    than the command line's) gets them here."""
    used = profile_in_use(runtime.context.profiles, state.get("user_id") or DEFAULT_USER)
    update: dict[str, Any] = {"profile": used.model_dump(mode="json")}
    if "schema_version" not in state:
        update["schema_version"] = SCHEMA_VERSION
    if "started_at" not in state:
        update["started_at"] = runtime.context.now().isoformat(timespec="seconds")
    return update
