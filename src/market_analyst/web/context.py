"""What every request handler shares: the settings read once at start, the approvers' store and the
sign-in gate (failure counts and sessions, in stores every server process shares). None of them
holds a store open."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from market_analyst.settings import Settings
from market_analyst.web import actions
from market_analyst.web.security import Gate, Sessions


@dataclass
class WebContext:
    """The server's shared parts, kept on `app.state.web`."""

    settings: Settings
    store: actions.Approvers
    gate: Gate
    sessions: Sessions

    @classmethod
    def create(cls, settings: Settings) -> WebContext:
        gate = Gate.open(settings)
        return cls(
            settings=settings,
            store=gate.approvers,
            gate=gate,
            sessions=Sessions(gate.approvers.session_secret(), gate, skew=settings.clock_skew),
        )


def web(request: Request) -> WebContext:
    """The context of the app serving `request`."""
    context: WebContext = request.app.state.web
    return context
