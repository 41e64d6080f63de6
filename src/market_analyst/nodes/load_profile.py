"""load_profile: read the user's stored risk profile, or fall back to stated defaults."""

from __future__ import annotations

from typing import Any

from market_analyst.deps import ProfileReader
from market_analyst.state import DEFAULT_USER, AnalystState, Profile, ProfileUsed


def load_profile(state: AnalystState, *, profiles: ProfileReader) -> dict[str, Any]:
    """Keep a copy of the profile in the state, so the run is analysed with what it read here."""
    user_id = state.get("user_id") or DEFAULT_USER
    stored = profiles.get(user_id)
    if stored is not None:
        used = ProfileUsed(source="stored", profile=stored)
    else:
        used = ProfileUsed(source="default", profile=Profile(user_id=user_id))
    return {"profile": used.model_dump(mode="json")}
