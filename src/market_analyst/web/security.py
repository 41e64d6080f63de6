"""Sign-in, sessions, CSRF, and what every request passes through first.

Browsers sign in with an approver's token and get a cookie holding a random session ID; the session
itself is a record in a store every server process shares (`workflow.sign_in`), so signing out,
an idle or absolute timeout, `approvers sessions --revoke`, removing the approver or re-issuing
their token ends it everywhere at once, and a copied cookie stops working with it. Before sign-in the
cookie holds only a signed nonce; the sign-in form's CSRF token is an HMAC of it under the server
secret, so even someone who reads the cookie cannot make the form's token. Every POST form carries
the session's CSRF token. The API takes `Authorization: Bearer <token>` and no cookie, so a page
elsewhere cannot make a browser send it.

`Guard` is the outermost layer of the app: it believes `X-Forwarded-Proto`/`-For` only from the
proxies it was told to trust, refuses a Host it was not told to serve and a body over the limit
before any of it is read, puts the security headers (and HSTS over HTTPS) on every response, errors
included, turns an unexpected error into a 500 without a traceback for the client, and logs one line
per request, with the reason when it was refused.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from itsdangerous import URLSafeTimedSerializer
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from market_analyst.formatting import printable
from market_analyst.workflow.approvers import Approver
from market_analyst.workflow.sign_in import Gate, NotForTheInbox, SessionRecord, TooManyFailures, WrongToken

__all__ = ["Gate", "NotForTheInbox", "TooManyFailures", "WrongToken"]

COOKIE = "ma_session"
SECURE_COOKIE = "__Host-ma_session"  # over HTTPS: Secure, Path=/, no Domain, so no other host sets it
MAX_BODY = 64 * 1024  # bytes: forms and JSON bodies are a few kilobytes at most
HSTS = "max-age=31536000"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
log = logging.getLogger("uvicorn.error")

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


def refused_because(request: Request, why: str) -> None:
    """Say why this request is refused, for its one line in the server's log."""
    request.scope.setdefault("state", {})["refused"] = why


# -- the outermost layer ------------------------------------------------------------------------------


class BodyTooLarge(HTTPException):
    """The request's body grew past the limit while it was being read (an HTTPException, so the
    framework's body parsing passes it on as a 413 instead of calling it a malformed body)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body is over the limit of {limit} bytes")


def _networks(addresses: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(address, strict=False) for address in addresses]


def _host_name(header: str) -> str:
    """The name in a Host header, without its port or an IPv6 address's brackets, lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class Guard:
    """ASGI middleware, outermost: see the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: frozenset[str],
        trusted_proxies: Iterable[str] = (),
        max_body: int = MAX_BODY,
        debug: bool = False,
    ) -> None:
        self.app = app
        self.hosts = frozenset(h.lower() for h in hosts)
        self.trusted = _networks(trusted_proxies)
        self.max_body = max_body
        self.debug = debug

    def _trusts(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted)

    def _forwarded(self, scope: Scope) -> None:
        """Believe a trusted proxy about the scheme and the client; never anyone else."""
        client = scope.get("client")
        if not self.trusted or not client or not self._trusts(client[0]):
            return
        proto = (_header(scope, b"x-forwarded-proto") or "").split(",")[-1].strip().lower()
        if proto in ("http", "https"):
            scope["scheme"] = proto
        hops = [hop.strip() for hop in (_header(scope, b"x-forwarded-for") or "").split(",") if hop.strip()]
        for hop in reversed(hops):  # the nearest untrusted hop is the client
            try:
                ipaddress.ip_address(hop)
            except ValueError:
                break
            if not self._trusts(hop):
                scope["client"] = (hop, 0)
                break

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        host = _header(scope, b"host")
        if host is None or _host_name(host) not in self.hosts:
            return 400, f"host {printable(host or '(none)')[:80]!r} is not served here"
        length = _header(scope, b"content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > self.max_body):
            return 413, f"body of {printable(length)[:20]} bytes is over the limit of {self.max_body}"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        started = time.monotonic()
        self._forwarded(scope)
        https = scope.get("scheme") == "https"
        sent: dict[str, Any] = {"status": None}

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    if name not in headers:
                        headers[name] = value
                if https:
                    headers["strict-transport-security"] = HSTS
                if message["status"] in (408, 413):
                    headers["connection"] = "close"  # the rest of the body is never read
            await send(message)

        received = 0

        async def receive_limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    state["refused"] = f"body over the limit of {self.max_body} bytes"
                    raise BodyTooLarge(self.max_body)
            return message

        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                state["refused"] = refusal[1]
                await _plain(send_guarded, scope, *refusal)
            else:
                await self.app(scope, receive_limited, send_guarded)
        except BodyTooLarge:
            state["refused"] = f"body over the limit of {self.max_body} bytes"
            if sent["status"] is None:
                await _plain(send_guarded, scope, 413, state["refused"])
        except Exception as exc:  # a bug: the client gets a 500, the log one line (--debug: more)
            where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
            state["refused"] = f"internal error {type(exc).__name__}: {printable(str(exc))[:200]}" + (
                f" at {where.filename}:{where.lineno}" if where else ""
            )
            if self.debug:
                log.error("%s", printable("".join(traceback.format_exception(exc))))
            if sent["status"] is None:
                await _plain(send_guarded, scope, 500, "internal error; the server's log says more")
        finally:
            _access_line(scope, sent["status"], state.get("refused"), time.monotonic() - started)


async def _plain(send: Send, scope: Scope, status: int, message: str) -> None:
    """A refusal from the outermost layer: JSON for the API, a line of text otherwise."""
    if scope.get("path", "").startswith("/api/") or scope.get("path") == "/healthz":
        body, kind = json.dumps({"detail": message}).encode(), b"application/json"
    else:
        body, kind = message.encode() + b"\n", b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _access_line(scope: Scope, status: int | None, why: str | None, seconds: float) -> None:
    """The request's one line: client, method and path, status, duration, the thread it named, and why
    it was refused. Never a header or a body, so never a token, a cookie or a form's fields."""
    client = scope.get("client")
    path = bytes(scope.get("raw_path") or scope.get("path", "").encode()).decode("latin-1")
    if scope.get("query_string"):
        path += "?" + bytes(scope["query_string"]).decode("latin-1")
    line = f'{client[0] if client else "-"} "{scope.get("method")} {printable(path)[:200]}" {status or "-"}'
    line += f" {seconds * 1000:.0f} ms"
    thread = (scope.get("path_params") or {}).get("thread_id")
    if thread:
        line += f" thread={printable(str(thread))[:80]}"
    log.info("%s", line + (f" refused: {why}" if why else ""))


# -- sessions -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    """The visitor's session: its CSRF token, and once signed in the approver and its record."""

    csrf: str
    cookie: str
    name: str | None = None
    token_id: str | None = None
    record: SessionRecord | None = None


def cookie_name(request: Request) -> str:
    """The session cookie's name: `__Host-` over HTTPS, where browsers enforce what it promises."""
    return SECURE_COOKIE if request.url.scheme == "https" else COOKIE


class Sessions:
    """Session cookies: a signed nonce before sign-in, a session ID (looked up in `gate`) after."""

    def __init__(self, secret: str, gate: Gate, *, skew: timedelta = timedelta(seconds=30)) -> None:
        self._secret = secret.encode()
        self._signer = URLSafeTimedSerializer(secret, salt="market-analyst-session")
        self.gate = gate
        self.lifetime = int(gate.sessions.lifetime)
        self.skew = skew.total_seconds()

    def _csrf(self, nonce: str) -> str:
        return hmac.new(self._secret, f"csrf:{nonce}".encode(), hashlib.sha256).hexdigest()

    def read(self, request: Request) -> Session | None:
        """The session the request's cookie names, if it is still live; None otherwise."""
        raw = request.cookies.get(cookie_name(request))
        if not raw or not raw.isascii():
            return None
        if raw.startswith("s."):
            record = self.gate.session(raw[2:])
            if record is None:
                return None
            return Session(record.csrf, raw, record.name, record.token_id, record)
        try:
            loaded, issued = self._signer.loads(raw, return_timestamp=True)
        except Exception:  # a bad signature, or a cookie not of our making
            return None
        # Its age by the issuing server's time, which the signature carries: a replica whose clock is
        # behind the one that served the sign-in page sees it issued in the future, by up to the skew
        # the settings allow (MA_CLOCK_SKEW), and one ahead sees it that much older.
        age = time.time() - issued.timestamp()
        if not -self.skew <= age <= self.lifetime + self.skew:
            return None
        return Session(self._csrf(str(loaded)), raw)

    def fresh(self) -> Session:
        """A new session before sign-in, with a new CSRF token."""
        nonce = secrets.token_urlsafe(16)
        return Session(self._csrf(nonce), self._signer.dumps(nonce))

    def start(self, approver: Approver, client: str) -> Session:
        """A new signed-in session (a new ID and CSRF token at every sign-in)."""
        session_id, record = self.gate.start_session(approver, client)
        return Session(record.csrf, f"s.{session_id}", record.name, record.token_id, record)

    def end(self, session: Session) -> None:
        """Sign out: the record goes, so the cookie (and any copy of it) signs no one in."""
        if session.record is not None:
            self.gate.end_session(session.record)

    def write(self, response: Any, request: Request, session: Session) -> None:
        """Set the session's cookie (Secure over HTTPS; it lives no longer than a session may)."""
        response.set_cookie(
            cookie_name(request),
            session.cookie,
            max_age=self.lifetime,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )

    def clear(self, response: Any, request: Request) -> None:
        """Tell the browser to forget the cookie (the record is what ends the session)."""
        response.delete_cookie(
            cookie_name(request),
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )


def csrf_matches(session: Session | None, submitted: str) -> bool:
    """The form's token is the session's, compared in constant time (as bytes: any text works)."""
    return (
        session is not None
        and bool(submitted)
        and hmac.compare_digest(session.csrf.encode(), submitted.encode("utf-8", "replace"))
    )


def signed_in(session: Session | None) -> str | None:
    """The approver's name if the session is signed in (its record was live when it was read)."""
    return session.name if session is not None and session.record is not None else None


def client_address(request: Request) -> str:
    """Who the sign-in limit counts: the peer, or the client a trusted proxy named."""
    return request.client.host if request.client else "unknown"


def bearer_token(request: Request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def allowed_hosts(bind: str, configured: Iterable[str]) -> frozenset[str]:
    """The Host names served: loopback's, the address listened on (unless it is every address),
    and the configured ones."""
    names = set(LOOPBACK_NAMES) | {name.lower().strip("[]") for name in configured}
    if bind not in ("0.0.0.0", "::", ""):
        names.add(bind.strip("[]").lower())
    return frozenset(names)
