"""What the nodes use, handed to `build_graph` in one object instead of module globals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from market_analyst.errors import UserError
from market_analyst.market_data import MarketDataProvider, open_provider
from market_analyst.persistence.archive import ReportArchive
from market_analyst.persistence.profiles import ProfileStore
from market_analyst.settings import Settings
from market_analyst.state import Profile


class ProfileReader(Protocol):
    """Reads one user's stored profile by exact user ID; None when there is none."""

    def get(self, user_id: str) -> Profile | None: ...


class Analyst(Protocol):
    """Turns figures and a profile into recommendation, confidence, risk factors and framing."""

    def analyse(
        self, ticker: str, figures: dict[str, Any], profile: Profile, feedback: list[str]
    ) -> dict[str, Any]: ...


class RulesAnalyst:
    """The built-in deterministic analyst (analyst/rules.py)."""

    def analyse(
        self, ticker: str, figures: dict[str, Any], profile: Profile, feedback: list[str]
    ) -> dict[str, Any]:
        from market_analyst.analyst import rules

        return rules.analyse(figures, profile)


def check_analyst(settings: Settings) -> None:
    """Refuse settings that choose the LLM analyst without a key, before a run starts."""
    if settings.uses_llm and not settings.openai_api_key:
        raise UserError("MA_ANALYST=llm needs OPENAI_API_KEY (and OPENAI_BASE_URL for another server)")


def open_analyst(settings: Settings) -> Analyst:
    """The LLM analyst when the settings choose it (or `OPENAI_API_KEY` is set), else the rules.

    Opens nothing: commands that only read a thread never touch the analyst, so they do not need
    its key; the commands that run it check first (`check_analyst`)."""
    if not settings.uses_llm:
        return RulesAnalyst()
    from market_analyst.analyst.llm import LLMAnalyst

    return LLMAnalyst(
        model=settings.openai_model, api_key=settings.openai_api_key or "", base_url=settings.openai_base_url
    )


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
    analyst: Analyst = field(default_factory=RulesAnalyst)

    @classmethod
    def from_settings(cls, settings: Settings) -> Deps:
        """The dependencies `settings` describe. Opens nothing until a node uses it."""
        return cls(
            market_data=open_provider(settings),
            profiles=ProfileStore.from_settings(settings),
            archive=ReportArchive(settings.archive_dir),
            now=settings.now,
            analyst=open_analyst(settings),
        )
