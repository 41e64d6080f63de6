"""What `approvers add|list|remove|sessions` do, and the store a web server signs approvers in with."""

from __future__ import annotations

import time

from market_analyst.deps import Approver, Approvers, SessionRecord, open_approvers, open_sessions
from market_analyst.errors import UserError
from market_analyst.settings import Settings

__all__ = [
    "Approver",
    "Approvers",
    "SessionRecord",
    "add_approver",
    "approver_store",
    "list_approvers",
    "list_sessions",
    "remove_approver",
    "revoke_sessions",
    "set_email",
    "set_role",
]


def add_approver(settings: Settings, name: str, role: str = "approver", email: str | None = None) -> str:
    """Make approver `name` with `role` (and `email`, where notifications reach them) and return its
    token (shown once; only its hash is kept)."""
    return open_approvers(settings).add(name, settings.now().isoformat(timespec="seconds"), role, email)


def set_email(settings: Settings, name: str, email: str | None) -> None:
    """Give approver `name` an address for notifications, or none."""
    if not open_approvers(settings).set_email(name, email):
        raise UserError(f"no approver named {name!r} (list them with: market-analyst approvers list)")


def set_role(settings: Settings, name: str, role: str) -> None:
    """Give approver `name` another role (approver or reviewer)."""
    if not open_approvers(settings).set_role(name, role):
        raise UserError(f"no approver named {name!r} (list them with: market-analyst approvers list)")


def list_approvers(settings: Settings) -> list[Approver]:
    """Every approver, by name."""
    return open_approvers(settings).list()


def remove_approver(settings: Settings, name: str) -> None:
    """Remove approver `name`: its token and its sessions stop working at once (the sessions'
    records are deleted too, so no later token of the same name revives them)."""
    if not open_approvers(settings).remove(name):
        raise UserError(f"no approver named {name!r} (list them with: market-analyst approvers list)")
    open_sessions(settings).revoke_all(name)


def _known(settings: Settings, name: str) -> None:
    if name not in {a.name for a in open_approvers(settings).list()}:
        raise UserError(f"no approver named {name!r} (list them with: market-analyst approvers list)")


def list_sessions(settings: Settings, name: str) -> list[SessionRecord]:
    """The signed-in sessions of approver `name`, oldest first (the real clock: sessions expire
    in real time even when SOURCE_DATE_EPOCH freezes the runs' clock)."""
    _known(settings, name)
    return open_sessions(settings).sessions(name, time.time())


def revoke_sessions(settings: Settings, name: str, label: str | None = None) -> list[SessionRecord]:
    """End approver `name`'s sessions (only the one whose label is `label`, if given) at once, in
    every server process; returns the sessions ended."""
    chosen = [s for s in list_sessions(settings, name) if label is None or s.label == label]
    if label is not None and not chosen:
        raise UserError(
            f"approver {name!r} has no session {label!r} "
            f"(list them with: market-analyst approvers sessions {name})"
        )
    store = open_sessions(settings)
    return [s for s in chosen if store.revoke(s.key)]


def approver_store(settings: Settings) -> Approvers:
    """The store a server keeps for its lifetime: it opens the file on each use, never holds it."""
    return open_approvers(settings)
