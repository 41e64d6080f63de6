"""The analysis ports: where prices come from, whose profile a run is for, and who judges them (the
built-in rules, and the chat model of the LLM analyst)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from market_analyst.state import Profile, ProfileUsed

if TYPE_CHECKING:
    from market_analyst.market_data.base import PriceHistory


class MarketDataProvider(Protocol):
    """Loads a ticker's daily history; raises `UserError` when it has none."""

    name: str

    def load(self, ticker: str) -> PriceHistory:
        """The ticker's daily adjusted closes, ascending by date."""
        ...

    def describe(self, as_of: str) -> str:
        """How a report names this source, e.g. "bundled snapshot, as of 2025-02-14"."""
        ...


class ProfileReader(Protocol):
    """Reads one user's stored profile by exact user ID; None when there is none."""

    def get(self, user_id: str) -> Profile | None:
        """The profile stored for exactly `user_id`, or None."""
        ...


def profile_in_use(profiles: ProfileReader, user_id: str) -> ProfileUsed:
    """The profile a run for `user_id` uses: the stored one, or the stated defaults."""
    stored = profiles.get(user_id)
    if stored is not None:
        return ProfileUsed(source="stored", profile=stored)
    return ProfileUsed(source="default", profile=Profile(user_id=user_id))


class Analyst(Protocol):
    """Turns figures and a profile into recommendation, confidence, risk factors and framing."""

    def analyse(
        self, ticker: str, figures: dict[str, Any], profile: Profile, feedback: list[str]
    ) -> dict[str, Any]:
        """The judgement of `figures` for `profile`, taking reviewer `feedback` into account."""
        ...


class ChatModel(Protocol):
    """One turn of a chat model that can call tools (the LLM analyst's agent loop)."""

    name: str

    def respond(self, messages: list[Any], tools: list[Any], *, answer_now: bool) -> Any:
        """The model's next message given the conversation; with `answer_now` it must submit its answer."""
        ...
