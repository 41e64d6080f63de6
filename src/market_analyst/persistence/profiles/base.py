"""What a profile session does, whatever engine holds the points: read by exact user ID, save whole
profiles, change single fields, delete. The rules the engines share are here; each engine (`edge`,
and `server` for a server or a local-mode folder) supplies three point operations."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from market_analyst.persistence.profiles.fields import checked_changes, point_id_for, stored_profile
from market_analyst.state import Profile, validate_user_id

# A stored point: its ID (a uuid5 string for every point this application writes) and its payload.
StoredPoint = tuple[str | int, dict[str, Any]]

UPSERT_BATCH = 1000


class ProfileSession(ABC):
    """One open store. Get it from `ProfileStore.session()`; it is closed when the block ends."""

    def __init__(self, *, now: Callable[[], datetime]) -> None:
        self._now = now

    @abstractmethod
    def _payload(self, point_id: str) -> dict[str, Any] | None:
        """The payload of the point with this ID, or None when there is no such point."""

    @abstractmethod
    def _put(self, points: Sequence[StoredPoint]) -> None:
        """Write whole points, each replacing any point with its ID; one call is one batch."""

    @abstractmethod
    def _remove(self, point_id: str) -> None:
        """Delete the point with this ID."""

    def get(self, user_id: str) -> Profile | None:
        """The profile stored for exactly `user_id`, or None. A point whose payload names another
        user (a planted or corrupted point under this user's ID) counts as no profile."""
        user_id = validate_user_id(user_id)
        return stored_profile(user_id, self._payload(point_id_for(user_id)))

    def save(self, profile: Profile) -> Profile:
        """Store `profile` (replacing any earlier one of that user) with `updated_at` set now."""
        return self.save_many([profile])[0]

    def save_many(self, profiles: Iterable[Profile], *, batch_size: int = UPSERT_BATCH) -> list[Profile]:
        """Store many profiles, in batches: each one replaces its user's earlier profile."""
        stamp = self._now().astimezone(UTC).isoformat(timespec="seconds")
        saved = [p.model_copy(update={"updated_at": stamp}) for p in profiles]
        for start in range(0, len(saved), batch_size):
            batch = saved[start : start + batch_size]
            self._put([(point_id_for(p.user_id), p.model_dump(mode="json")) for p in batch])
        return saved

    def update(self, user_id: str, **changes: Any) -> Profile:
        """Change only the given fields of the user's profile (starting from the defaults when there is
        none) and store it. Every value is checked first: a bad one stores nothing.

        The whole profile is written back as one point, so a crash leaves the old or the new one; the
        read and the write happen inside one open store, which no other process can hold meanwhile."""
        given = checked_changes(user_id, **changes)
        current = self.get(user_id) or Profile(user_id=user_id)
        # Both parts are valid on their own, and fields do not constrain each other.
        return self.save(current.model_copy(update=given))

    def delete(self, user_id: str) -> bool:
        """Remove the user's profile, readable or not; False when there was none to remove. A point
        under this user's ID whose payload names someone else is not theirs, so it stays."""
        user_id = validate_user_id(user_id)
        point_id = point_id_for(user_id)
        payload = self._payload(point_id)
        if payload is None or payload.get("user_id") != user_id:
            return False
        self._remove(point_id)
        return True
