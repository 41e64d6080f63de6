"""A profile session on Qdrant through `qdrant-client` (local mode or a server): one open client."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from market_analyst.errors import UserError
from market_analyst.persistence.profile_fields import checked_changes, one_line_validation_error, point_id_for
from market_analyst.state import Profile, validate_user_id

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

COLLECTION = "profiles"
UPSERT_BATCH = 1000


class ProfileSession:
    """One open client on the profile collection. Get it from `ProfileStore.session()`."""

    def __init__(self, client: QdrantClient, *, now: Callable[[], datetime], server: bool) -> None:
        self._client = client
        self._now = now
        self._server = server
        self._ready = False

    def _exists(self) -> bool:
        if not self._ready:
            self._ready = self._client.collection_exists(COLLECTION)
        return self._ready

    def _ensure_collection(self) -> None:
        if self._exists():
            return
        from qdrant_client import models

        # No vectors: a profile is looked up by user ID, never by similarity.
        try:
            self._client.create_collection(COLLECTION, vectors_config={})
        except Exception:
            # On a server another process may have created it between the check and the create.
            if not self._client.collection_exists(COLLECTION):
                raise
        if self._server:
            # Tenant-aware keyword index: a server co-locates each user's points and filters on
            # `user_id` without a scan. Local mode ignores payload indexes, so it is not asked to.
            self._client.create_payload_index(
                COLLECTION,
                field_name="user_id",
                field_schema=models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
            )
        self._ready = True

    def get(self, user_id: str) -> Profile | None:
        """The profile stored for exactly `user_id`, or None. A point whose payload names another
        user (a planted or corrupted point under this user's ID) counts as no profile."""
        user_id = validate_user_id(user_id)
        if not self._exists():
            return None
        records = self._client.retrieve(
            COLLECTION, ids=[point_id_for(user_id)], with_payload=True, with_vectors=False
        )
        for record in records:
            payload = record.payload or {}
            # The exact-match check is what keeps users apart: a point ID is only where to look.
            if payload.get("user_id") != user_id:
                continue
            try:
                return Profile.model_validate(payload)
            except ValidationError as exc:
                problem = one_line_validation_error(exc)
                raise UserError(
                    f"the stored profile of user {user_id!r} is unreadable ({problem}); replace it with "
                    f"'market-analyst profile set --user {user_id}' or remove it with 'profile delete'"
                ) from None
        return None

    def save(self, profile: Profile) -> Profile:
        """Store `profile` (replacing any earlier one of that user) with `updated_at` set now."""
        return self.save_many([profile])[0]

    def save_many(self, profiles: Iterable[Profile], *, batch_size: int = UPSERT_BATCH) -> list[Profile]:
        """Store many profiles, in batches: each one replaces its user's earlier profile."""
        from qdrant_client import models

        self._ensure_collection()
        stamp = self._now().astimezone(UTC).isoformat(timespec="seconds")
        saved = [p.model_copy(update={"updated_at": stamp}) for p in profiles]
        for start in range(0, len(saved), batch_size):
            points = [
                models.PointStruct(id=point_id_for(p.user_id), vector={}, payload=p.model_dump(mode="json"))
                for p in saved[start : start + batch_size]
            ]
            with warnings.catch_warnings():
                # Local mode warns past 20,000 points; the store's users are told so in the README instead.
                warnings.simplefilter("ignore", UserWarning)
                self._client.upsert(COLLECTION, points=points, wait=True)
        return saved

    def update(self, user_id: str, **changes: Any) -> Profile:
        """Change only the given fields of the user's profile (starting from the defaults when there is
        none) and store it. Every value is checked first: a bad one stores nothing."""
        given = checked_changes(user_id, **changes)
        current = self.get(user_id) or Profile(user_id=user_id)
        # Both parts are valid on their own, and fields do not constrain each other.
        return self.save(current.model_copy(update=given))

    def delete(self, user_id: str) -> bool:
        """Remove the user's profile; False when there was none to remove."""
        from qdrant_client import models

        user_id = validate_user_id(user_id)
        if self.get(user_id) is None:
            return False
        self._client.delete(
            COLLECTION, points_selector=models.PointIdsList(points=[point_id_for(user_id)]), wait=True
        )
        return True
