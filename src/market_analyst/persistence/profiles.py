"""User profiles in Qdrant: cross-thread memory, read by exact user ID, never by similarity.

One point per user. Its ID is the uuid5 of the user ID, so saving again replaces the profile, and a
read is a point lookup (`retrieve`) whose payload must name exactly the requested user: a point that
names anyone else is treated as absent, never returned. The collection has no vectors at all; Qdrant
accepts payload-only collections in local mode and on a server, so nothing is embedded.

Qdrant local mode (the default, in `MA_DATA_DIR/profiles`) allows one process per folder, so the store
opens its client for one operation and closes it, waiting briefly when another process holds the
folder. `qdrant_client` costs about a second to import, so it is imported only when a profile is
actually read or written.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from market_analyst.errors import UserError
from market_analyst.settings import Settings
from market_analyst.state import HORIZONS, RISK_TOLERANCES, Profile, validate_user_id

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

COLLECTION = "profiles"
# Fixed forever: changing it would orphan every stored profile (their point IDs derive from it).
PROFILE_NAMESPACE = uuid.UUID("0b7f5a52-3c1e-5d8a-9f4e-6a2d1c8b7e90")
LOCK_WAIT_SECONDS = 5.0
UPSERT_BATCH = 1000
_FOLDER_HELD = "already accessed by another instance"


def point_id_for(user_id: str) -> str:
    """The deterministic point ID of a user's profile: the same user always lands on the same point."""
    return str(uuid.uuid5(PROFILE_NAMESPACE, user_id))


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _one_line_validation_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as one line that names the field."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"] if not isinstance(part, int)) or "profile"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"invalid profile {field}: {message}"


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise UserError(f"{option} {value!r} is not one of: {', '.join(allowed)}")
    return value


def parse_sectors(raw: str) -> list[str]:
    """`"a, b,,a"` -> `["a", "b"]`: comma-separated, trimmed, empty and repeated entries dropped."""
    seen: dict[str, None] = {}
    for part in raw.split(","):
        part = part.strip()
        if part:
            seen.setdefault(part, None)
    return list(seen)


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
    if risk_tolerance is not None:
        _choice("--risk-tolerance", risk_tolerance, RISK_TOLERANCES)
    if horizon is not None:
        _choice("--horizon", horizon, HORIZONS)
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
        raise UserError(_one_line_validation_error(exc)) from None
    return {k: getattr(checked, k) for k in given}


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
                problem = _one_line_validation_error(exc)
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


class ProfileStore:
    """Profiles in Qdrant local mode (`path`) or on a Qdrant server (`url`). Satisfies `ProfileReader`.

    Constructing it opens nothing; each method opens a client for that one operation and closes it.
    """

    def __init__(
        self,
        *,
        path: Path | None = None,
        url: str | None = None,
        api_key: str | None = None,
        now: Callable[[], datetime] = _utc_now,
        lock_wait_seconds: float = LOCK_WAIT_SECONDS,
    ) -> None:
        if (path is None) == (url is None):
            raise ValueError("ProfileStore needs exactly one of path (local mode) or url (server)")
        self.path = path
        self.url = url
        self._api_key = api_key
        self._now = now
        self._lock_wait_seconds = lock_wait_seconds

    @classmethod
    def from_settings(cls, settings: Settings) -> ProfileStore:
        """The store `settings` describe: `QDRANT_URL` if set, else local mode in the data directory."""
        if settings.qdrant_url:
            return cls(url=settings.qdrant_url, api_key=settings.qdrant_api_key, now=settings.now)
        return cls(path=settings.profiles_dir, now=settings.now)

    @property
    def location(self) -> str:
        """Where the profiles live, for messages (a server URL or a local folder)."""
        return self.url or str(self.path)

    def _open_local(self) -> QdrantClient:
        from qdrant_client import QdrantClient

        deadline = time.monotonic() + self._lock_wait_seconds
        while True:
            try:
                with warnings.catch_warnings():
                    # Opening a store of more than 20,000 points warns on stderr; a command prints one line.
                    warnings.simplefilter("ignore", UserWarning)
                    return QdrantClient(path=str(self.path))
            except RuntimeError as exc:
                if _FOLDER_HELD not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise UserError(
                        f"the profile store {self.path} is in use by another process (Qdrant local mode "
                        f"allows one process per folder); waited {self._lock_wait_seconds:g} s: try again "
                        "when it finishes, or set QDRANT_URL to use a Qdrant server"
                    ) from None
                time.sleep(0.1)

    def _open_server(self) -> QdrantClient:
        from qdrant_client import QdrantClient

        # No version check on connect: it warns on stderr when the server is down, and the first
        # request reports that anyway, as one line.
        return QdrantClient(url=self.url, api_key=self._api_key, check_compatibility=False)

    @contextmanager
    def session(self) -> Iterator[ProfileSession]:
        """One open client for several operations (bulk loads, benchmarks); closed on exit."""
        client = self._open_server() if self.url else self._open_local()
        try:
            yield ProfileSession(client, now=self._now, server=self.url is not None)
        except Exception as exc:
            if self.url and _is_server_error(exc):
                raise UserError(f"the Qdrant server at {self.url} failed: {exc}") from None
            raise
        finally:
            client.close()

    def get(self, user_id: str) -> Profile | None:
        """The profile stored for exactly `user_id`, or None."""
        user_id = validate_user_id(user_id)
        if self.path is not None and not self.path.exists():
            return None  # nothing was ever saved: no need to create the folder or import the client
        with self.session() as session:
            return session.get(user_id)

    def save(self, profile: Profile) -> Profile:
        """Store `profile`, replacing the user's earlier one; returns it with `updated_at` set."""
        with self.session() as session:
            return session.save(profile)

    def update(self, user_id: str, **changes: Any) -> Profile:
        """Change only the given fields (see `ProfileSession.update`) and return the stored profile."""
        checked_changes(user_id, **changes)  # refuse bad values before waiting for the store
        with self.session() as session:
            return session.update(user_id, **changes)

    def delete(self, user_id: str) -> bool:
        """Remove the user's profile; False when there was none."""
        user_id = validate_user_id(user_id)
        if self.path is not None and not self.path.exists():
            return False
        with self.session() as session:
            return session.delete(user_id)


def _is_server_error(exc: Exception) -> bool:
    """A refused or failed request to a server (down, wrong key): the user's to fix, not a bug."""
    from qdrant_client.http.exceptions import ApiException

    return isinstance(exc, ApiException | ConnectionError)
