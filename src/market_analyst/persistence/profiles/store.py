"""User profiles in Qdrant: cross-thread memory, read by exact user ID, never by similarity.

One point per user. Its ID is the uuid5 of the user ID, so saving again replaces the profile, and a
read is a point lookup whose payload must name exactly the requested user: a point that names anyone
else is treated as absent, never returned. Points carry no vectors, so nothing is embedded.

Three engines hold the points:

- Qdrant Edge (the default, `MA_DATA_DIR/profiles`; `edge`): Qdrant's engine in-process. A folder
  that `qdrant-client` local mode wrote there is migrated on first use (`edge_setup`).
- `qdrant-client` local mode (`MA_PROFILE_STORE=local`; `local_mode`), for platforms without an
  Edge wheel.
- A Qdrant server (`QDRANT_URL`; `server`), through `qdrant-client`: several machines, many writers.

Both embedded engines admit one process at a time, so the store is opened for one operation and
closed, waiting briefly (`store_access`) when another process holds it. `qdrant_client` is imported
only when a server or a local-mode folder is used: reading a profile from Edge does without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from market_analyst.choices import ProfileStoreKind
from market_analyst.errors import UserError
from market_analyst.files import private_dir, private_tree, refuse_under_file
from market_analyst.persistence.profiles.base import ProfileSession
from market_analyst.persistence.profiles.edge_setup import (
    Migration,
    ensure_edge_store,
    has_store,
    session_lock_path,
    settle_beside,
    setup_lock_path,
)
from market_analyst.persistence.profiles.fields import checked_changes, point_id_for
from market_analyst.persistence.qdrant import edge_shard
from market_analyst.persistence.qdrant.server import connected, open_server_client
from market_analyst.persistence.store_access import LOCK_WAIT_SECONDS, lock_file, wait_while_busy
from market_analyst.redaction import redact_url
from market_analyst.state import Profile, validate_user_id

__all__ = ["Migration", "ProfileSession", "ProfileStore", "point_id_for"]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ProfileStore:
    """Profiles in an embedded store at `path` (Qdrant Edge, or local mode with `engine="local"`) or
    on a Qdrant server (`url`). Satisfies `ProfileReader`.

    Constructing it opens nothing; each method opens the store for that one operation and closes it.
    """

    def __init__(
        self,
        *,
        path: Path | None = None,
        url: str | None = None,
        api_key: str | None = None,
        engine: ProfileStoreKind = "edge",
        now: Callable[[], datetime] = _utc_now,
        lock_wait_seconds: float = LOCK_WAIT_SECONDS,
    ) -> None:
        if (path is None) == (url is None):
            raise ValueError("ProfileStore needs exactly one of path (embedded) or url (server)")
        self.path = path
        self.url = url
        self.engine = engine
        self._api_key = api_key
        self._now = now
        self._lock_wait_seconds = lock_wait_seconds

    @property
    def location(self) -> str:
        """Where the profiles live, for messages (a server URL or a local folder)."""
        return self.url or str(self.path)

    def _wait(self, attempt: Callable[[], Any]) -> Any:
        return wait_while_busy(attempt, location=self.location, seconds=self._lock_wait_seconds)

    @contextmanager
    def _server_session(self, url: str) -> Iterator[ProfileSession]:
        from market_analyst.persistence.profiles.server import QdrantClientSession

        with connected(
            lambda: open_server_client(url, self._api_key), location=url, unanswered="; nothing was written"
        ) as client:
            yield QdrantClientSession(client, now=self._now, server=True)

    @contextmanager
    def _edge_session(self, path: Path) -> Iterator[ProfileSession]:
        from market_analyst.persistence.profiles.edge import EdgeSession, load_shard

        def attempt() -> tuple[ExitStack, Any]:
            with ExitStack() as held:
                # Held from before the shard opens until its files are owner-only after it closed.
                # Edge's own lock (its log) is released while the shard still finishes closing, and
                # the next process writing (through temporary files it renames) while this one walks
                # the folder was seen to read undecodable values and to trip the walk.
                held.enter_context(lock_file(session_lock_path(path)))
                ensure_edge_store(path)
                settle_beside(path)
                return held.pop_all(), load_shard(path)

        held, shard = self._wait(attempt)
        with held:
            session = EdgeSession(shard, path, setup_lock=setup_lock_path(path), now=self._now)
            try:
                yield session
            finally:
                session.close()
                private_tree(path)  # Edge creates its files with the umask's modes

    @contextmanager
    def _local_mode_session(self, path: Path) -> Iterator[ProfileSession]:
        from market_analyst.persistence.profiles.local_mode import open_local_client
        from market_analyst.persistence.profiles.server import QdrantClientSession

        def attempt() -> tuple[ExitStack, Any]:
            with ExitStack() as held:
                # Shared: local-mode users keep a migration to Edge out, not one another (the
                # folder's own lock does that).
                held.enter_context(lock_file(setup_lock_path(path), shared=True))
                if edge_shard.is_shard(path):
                    raise UserError(
                        f"{path} is a Qdrant Edge store, and MA_PROFILE_STORE=local reads only Qdrant "
                        "local-mode folders: set MA_PROFILE_STORE=edge (the default) to use it"
                    )
                client = open_local_client(private_dir(path, "the profile store"))
                return held.pop_all(), client

        held, client = self._wait(attempt)
        with held:
            try:
                yield QdrantClientSession(client, now=self._now, server=False)
            finally:
                client.close()
                private_tree(path)  # so does qdrant-client

    def session(self) -> AbstractContextManager[ProfileSession]:
        """One open store for several operations (bulk loads, benchmarks); closed on exit."""
        if self.url is not None:
            return self._server_session(self.url)
        assert self.path is not None
        if self.engine == "local":
            return self._local_mode_session(self.path)
        return self._edge_session(self.path)

    def _absent(self) -> bool:
        # Nothing was ever saved: no need to create the folder or import a client. A folder that
        # could never be made (under a file) is not an empty store, though: say so.
        if self.path is None or has_store(self.path):
            return False
        refuse_under_file(self.path, "the profile store")
        return True

    def get(self, user_id: str) -> Profile | None:
        """The profile stored for exactly `user_id`, or None."""
        user_id = validate_user_id(user_id)
        if self._absent():
            return None
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
        if self._absent():
            return False
        with self.session() as session:
            return session.delete(user_id)

    def migrate(self) -> Migration:
        """Move a local-mode folder at the store's path to Qdrant Edge now (every command would
        otherwise do it on first use); says what moved, if anything."""
        if self.path is None or self.engine != "edge":
            using = f"the Qdrant server at {redact_url(self.url)}" if self.url else "MA_PROFILE_STORE=local"
            raise UserError(f"profiles use {using}; only the embedded Qdrant Edge store is migrated to")
        path = self.path
        if not has_store(path):
            return Migration(store=path)
        done = self._wait(lambda: ensure_edge_store(path))
        return done or Migration(store=path)
