"""The rules of a stored profile: where a user's point lives, and which changes are valid."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import ValidationError

from market_analyst.errors import UserError
from market_analyst.state import Profile, validate_user_id

# Fixed forever: changing it would orphan every stored profile (their point IDs derive from it).
PROFILE_NAMESPACE = uuid.UUID("0b7f5a52-3c1e-5d8a-9f4e-6a2d1c8b7e90")


def point_id_for(user_id: str) -> str:
    """The deterministic point ID of a user's profile: the same user always lands on the same point."""
    return str(uuid.uuid5(PROFILE_NAMESPACE, user_id))


def one_line_validation_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as one line that names the field."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"] if not isinstance(part, int)) or "profile"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"invalid profile {field}: {message}"


def checked_changes(
    user_id: str,
    *,
    risk_tolerance: str | None = None,
    horizon: str | None = None,
    preferred_sectors: list[str] | None = None,
    notes: str | None = None,
) -> dict[str, Any]:
    """The fields to change (None means "leave as is"), each checked; raises `UserError` on the first
    bad one, before any store is opened."""
    validate_user_id(user_id)
    given = {
        k: v
        for k, v in {
            "risk_tolerance": risk_tolerance,
            "horizon": horizon,
            "preferred_sectors": preferred_sectors,
            "notes": notes,
        }.items()
        if v is not None
    }
    try:
        checked = Profile.model_validate({"user_id": user_id, **given})
    except ValidationError as exc:
        raise UserError(one_line_validation_error(exc)) from None
    return {k: getattr(checked, k) for k in given}


def stored_profile(user_id: str, payload: dict[str, Any] | None) -> Profile | None:
    """The profile in a stored point's `payload`, read for exactly `user_id`: None when there is no
    point, or when its payload names anyone else (a point ID is only where to look; the exact match is
    what keeps users apart). A payload of this user that no longer validates is a `UserError`."""
    if payload is None or payload.get("user_id") != user_id:
        return None
    try:
        return Profile.model_validate(payload)
    except ValidationError as exc:
        problem = one_line_validation_error(exc)
        raise UserError(
            f"the stored profile of user {user_id!r} is unreadable ({problem}); remove it with "
            f"'market-analyst profile delete --user {user_id}', then set it again with 'profile set'"
        ) from None
