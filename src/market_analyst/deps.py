"""What the nodes use, handed to `build_graph` in one object instead of module globals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from market_analyst.market_data import MarketDataProvider, open_provider
from market_analyst.persistence.archive import ReportArchive
from market_analyst.persistence.profiles import ProfileStore
from market_analyst.settings import Settings
from market_analyst.state import Profile


class ProfileReader(Protocol):
    """Reads one user's stored profile by exact user ID; None when there is none."""

    def get(self, user_id: str) -> Profile | None: ...


class NoProfiles:
    """A profile reader with nothing stored: every run uses the defaults."""

    def get(self, user_id: str) -> Profile | None:
        return None


@dataclass(frozen=True)
class Deps:
    """Market data, profiles, the archive and the clock, as the nodes see them."""

    market_data: MarketDataProvider
    profiles: ProfileReader
    archive: ReportArchive
    now: Callable[[], datetime]

    @classmethod
    def from_settings(cls, settings: Settings) -> Deps:
        """The dependencies `settings` describe. Opens nothing until a node uses it."""
        return cls(
            market_data=open_provider(settings),
            profiles=ProfileStore.from_settings(settings),
            archive=ReportArchive(settings.archive_dir),
            now=settings.now,
        )
