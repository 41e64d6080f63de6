"""Sign-in, sessions, CSRF and the headers every response carries.

Browsers sign in with an approver's token and get a session cookie signed with the server secret
(HttpOnly, SameSite=Strict); it names the approver and the token it signed in with, so removing the
approver (or issuing a new token) ends the session. Every POST form carries the session's CSRF token.
The API takes `Authorization: Bearer <token>` and no cookie, so a page elsewhere cannot make a
browser send it. Failed sign-ins (form or bearer) are limited per client address.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from market_analyst.web.actions import ApproverStore

COOKIE = "ma_session"
SESSION_SECONDS = 12 * 3600
MAX_FAILED_SIGN_INS = 5  # per client address ...
FAILURE_WINDOW_SECONDS = 60.0  # ... within this many seconds; then 429 until the oldest ages out

CSP = (
    "default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


class SecurityHeaders:
    """ASGI middleware: the CSP and its companions on every response, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class TooManyFailures(Exception):
    """The client failed to sign in too often; it may try again after `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed sign-ins from this address; try again in {retry_after} s")
        self.retry_after = retry_after


@dataclass
class SignInLimiter:
    """Failed sign-ins per client address in a sliding window (in memory: one server process)."""

    max_failures: int = MAX_FAILED_SIGN_INS
    window: float = FAILURE_WINDOW_SECONDS
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, client: str) -> None:
        """Raise `TooManyFailures` while the client has used up its failures."""
        now = time.monotonic()
        with self._lock:
            recent = self._failures.get(client)
            while recent and recent[0] <= now - self.window:
                recent.popleft()
            if recent is not None and len(recent) >= self.max_failures:
                raise TooManyFailures(int(recent[0] + self.window - now) + 1)

    def failed(self, client: str) -> None:
        """Count one failed sign-in."""
        with self._lock:
            self._failures.setdefault(client, deque()).append(time.monotonic())


@dataclass(frozen=True)
class Session:
    """What the cookie says: the CSRF token, and the approver once signed in."""

    csrf: str
    name: str | None = None
    token_id: str | None = None


class Sessions:
    """Signed session cookies (itsdangerous, keyed with the server secret)."""

    def __init__(self, secret: str) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt="market-analyst-session")

    def read(self, request: Request) -> Session | None:
        raw = request.cookies.get(COOKIE)
        if not raw:
            return None
        try:
            data: dict[str, Any] = self._serializer.loads(raw, max_age=SESSION_SECONDS)
        except BadSignature:  # also an expired one (SignatureExpired is a BadSignature)
            return None
        return Session(csrf=str(data["c"]), name=data.get("n"), token_id=data.get("t"))

    def write(self, response: Any, request: Request, session: Session) -> None:
        data = {"c": session.csrf} | ({"n": session.name, "t": session.token_id} if session.name else {})
        response.set_cookie(
            COOKIE,
            self._serializer.dumps(data),
            max_age=SESSION_SECONDS,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )

    @staticmethod
    def fresh(name: str | None = None, token_id: str | None = None) -> Session:
        """A new session with a new CSRF token (a new one at every sign-in)."""
        return Session(csrf=secrets.token_urlsafe(32), name=name, token_id=token_id)


def csrf_matches(session: Session | None, submitted: str) -> bool:
    """The form's token is the session's, compared in constant time."""
    return session is not None and bool(submitted) and secrets.compare_digest(session.csrf, submitted)


def signed_in(store: ApproverStore, session: Session | None) -> str | None:
    """The approver's name if the session is signed in and its token is still the approver's."""
    if session is None or not session.name or not session.token_id:
        return None
    approver = store.current(session.name, session.token_id)
    return approver.name if approver else None


def client_address(request: Request) -> str:
    """Who the rate limit counts: the peer address (the server trusts no forwarding header)."""
    return request.client.host if request.client else "unknown"


def bearer_token(request: Request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
