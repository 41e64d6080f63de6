"""What every request handler shares: the settings read once at start, the approvers' store, the
session signer and the sign-in limiter. None of them holds a store open."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

from market_analyst.settings import Settings
from market_analyst.web import actions
from market_analyst.web.security import Sessions, SignInLimiter


@dataclass
class WebContext:
    """The server's shared parts, kept on `app.state.web`."""

    settings: Settings
    store: actions.ApproverStore
    sessions: Sessions
    limiter: SignInLimiter = field(default_factory=SignInLimiter)

    @classmethod
    def create(cls, settings: Settings) -> WebContext:
        store = actions.approvers(settings)
        return cls(settings=settings, store=store, sessions=Sessions(store.session_secret()))


def web(request: Request) -> WebContext:
    """The context of the app serving `request`."""
    context: WebContext = request.app.state.web
    return context
