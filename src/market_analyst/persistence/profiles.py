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
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from market_analyst.errors import UserError
from market_analyst.files import private_dir, private_tree
from market_analyst.persistence.profile_fields import checked_changes, point_id_for
from market_analyst.persistence.qdrant_profiles import COLLECTION, ProfileSession
from market_analyst.settings import Settings
from market_analyst.state import Profile, validate_user_id

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

__all__ = ["COLLECTION", "ProfileSession", "ProfileStore", "point_id_for"]

LOCK_WAIT_SECONDS = 5.0
_FOLDER_HELD = "already accessed by another instance"


def _utc_now() -> datetime:
    return datetime.now(UTC)


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
            return cls(url=settings.qdrant_url, api_key=settings.secret("qdrant_api_key"), now=settings.now)
        return cls(path=settings.profiles_dir, now=settings.now)

    @property
    def location(self) -> str:
        """Where the profiles live, for messages (a server URL or a local folder)."""
        return self.url or str(self.path)

    def _open_local(self) -> QdrantClient:
        from qdrant_client import QdrantClient

        assert self.path is not None
        private_dir(self.path, "the profile store")
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
            if self.path is not None:
                private_tree(self.path)  # qdrant-client creates its files with the umask's modes

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
