"""Signing in to the web inbox: tokens checked against a limit that cannot be turned against a
valid approver, and sessions kept in a store every server process shares.

The limit counts failures in two kinds of bucket, host-wide and atomically (the checks of one
bucket take turns, so concurrent guesses cannot overshoot it):

- by **token ID** (the part before the dot), for a token whose ID is an approver's: at most
  `MAX_FAILURES` wrong secrets per ID in `WINDOW_SECONDS`;
- by **address group** (an IPv4 /24, an IPv6 /64: loopback aliases or the addresses of one host
  count together), for a token whose ID is no approver's, or one that is not a token at all; and
  all of those together, from every address, at most `MAX_UNKNOWN_FAILURES` in the window (such a
  token can never be valid, so this cap refuses no approver).

A valid token never falls into an address bucket, so failures from its address never hold it up;
a token this server verified before is recognised without argon2 and skips the limit entirely.
A refusal for the limit (429) means the token was not verified; a 401 means it was, and was wrong.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass

from market_analyst.deps import (
    Approver,
    Approvers,
    SessionRecord,
    Sessions,
    SignInFailures,
    open_approvers,
    open_sessions,
    open_sign_in_limits,
)
from market_analyst.settings import Settings

MAX_FAILURES = 5
WINDOW_SECONDS = 60.0
# Tokens whose ID is no approver's, from every address together (each still within its own five).
MAX_UNKNOWN_FAILURES = 50
UNKNOWN = "unknown-token-ids"

__all__ = [
    "MAX_FAILURES",
    "MAX_UNKNOWN_FAILURES",
    "WINDOW_SECONDS",
    "Gate",
    "SessionRecord",
    "TooManyFailures",
    "WrongToken",
    "address_group",
]


class TooManyFailures(Exception):
    """This token (or this address) failed too often; it may try again after `retry_after` s."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed sign-ins; try again in {retry_after} s")
        self.retry_after = retry_after


class WrongToken(Exception):
    """The token is not an approver's (`why` says what was wrong, for the server's log)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class NotForTheInbox(WrongToken):
    """A good token of a role the inbox is not for: requesters and operators work through LangGraph's
    server, and would otherwise see every user's pending threads here."""


# The roles that sign in to the web inbox and its API: they review and decide.
INBOX_ROLES = frozenset({"reviewer", "approver"})


def address_group(client: str) -> str:
    """The bucket an address counts in: its /24 (IPv4) or /64 (IPv6); the text itself otherwise."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return f"addr:{client[:64]}"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    prefix = 24 if address.version == 4 else 64
    return f"addr:{ipaddress.ip_network(f'{address}/{prefix}', strict=False)}"


@dataclass
class Gate:
    """What a web server signs approvers in with: the approvers, the failure counts and the
    sessions, all in stores shared with every other server process and the command line."""

    approvers: Approvers
    limits: SignInFailures
    everyone: SignInFailures
    sessions: Sessions

    @classmethod
    def open(cls, settings: Settings) -> Gate:
        """The gate over the stores `settings` name (opening none of them yet)."""
        return cls(
            approvers=open_approvers(settings),
            limits=open_sign_in_limits(settings, limit=MAX_FAILURES, window=WINDOW_SECONDS),
            everyone=open_sign_in_limits(settings, limit=MAX_UNKNOWN_FAILURES, window=WINDOW_SECONDS),
            sessions=open_sessions(settings),
        )

    def authenticate(self, token: str, client: str) -> Approver:
        """The approver whose token this is; `WrongToken` (counted), `NotForTheInbox` (a requester's
        or an operator's token) or `TooManyFailures` (not verified at all) otherwise."""
        approver = self._authenticate(token, client)
        if approver.role not in INBOX_ROLES:
            raise NotForTheInbox(f"a {approver.role}'s token: the inbox is for reviewers and approvers")
        return approver

    def _authenticate(self, token: str, client: str) -> Approver:
        known = self.approvers.recognised(token)
        if known is not None:
            return known
        token_id, dot, _ = token.partition(".")
        known_id = bool(dot) and self.approvers.knows_token_id(token_id)
        key = f"token:{token_id}" if known_id else address_group(client)
        # Tokens of no approver all take one turn, so the host-wide cap on them is exact too.
        with self.limits.turn(key if known_id else UNKNOWN):
            known = self.approvers.recognised(token)  # verified while this one waited its turn
            if known is not None:
                return known
            now = time.time()
            wait = self.limits.retry_after(key, now)
            if wait is None and not known_id:
                wait = self.everyone.retry_after(UNKNOWN, now)
            if wait is not None:
                raise TooManyFailures(int(wait) + 1)
            approver = self.approvers.authenticate(token)
            if approver is None:
                self.limits.failed(key, time.time())
                if not known_id:
                    self.everyone.failed(UNKNOWN, time.time())
                raise WrongToken("wrong token" if known_id else "not an approver's token")
            return approver

    # -- sessions ---------------------------------------------------------------------------------

    def start_session(self, approver: Approver, client: str) -> tuple[str, SessionRecord]:
        """A new session for `approver` (the ID goes into the cookie)."""
        return self.sessions.create(
            name=approver.name, token_id=approver.token_id, client=client, now=time.time()
        )

    def session(self, session_id: str) -> SessionRecord | None:
        """The live session with this ID whose approver still holds the token it signed in with,
        its use recorded; None when it was signed out, revoked, timed out or its approver removed."""
        now = time.time()
        record = self.sessions.find(session_id, now)
        current = None if record is None else self.approvers.current(record.name, record.token_id)
        if record is None or current is None or current.role not in INBOX_ROLES:
            return None
        # Record the use often enough for the idle limit to be right within a few percent.
        if now - record.last_seen >= min(60.0, self.sessions.idle / 20):
            return self.sessions.touch(record.key, now)
        return record

    def end_session(self, record: SessionRecord) -> None:
        """Sign out: the session's record is gone, so a copy of its cookie signs no one in."""
        self.sessions.revoke(record.key)
