"""What `approvers add|list|remove` do, and the store a web server signs approvers in with."""

from __future__ import annotations

from market_analyst.deps import Approver, ApproverStore, open_approvers
from market_analyst.errors import UserError
from market_analyst.settings import Settings

__all__ = [
    "Approver",
    "ApproverStore",
    "add_approver",
    "approver_store",
    "list_approvers",
    "remove_approver",
    "set_role",
]


def add_approver(settings: Settings, name: str, role: str = "approver") -> str:
    """Make approver `name` with `role` and return its token (shown once; only its hash is kept)."""
    return open_approvers(settings).add(name, settings.now().isoformat(timespec="seconds"), role)


def set_role(settings: Settings, name: str, role: str) -> None:
    """Give approver `name` another role (approver or reviewer)."""
    if not open_approvers(settings).set_role(name, role):
        raise UserError(f"no approver named {name!r} (list them with: market-analyst approvers list)")


def list_approvers(settings: Settings) -> list[Approver]:
    """Every approver, by name."""
    return open_approvers(settings).list()


def remove_approver(settings: Settings, name: str) -> None:
    """Remove approver `name`: its token and its sessions stop working at once."""
    if not open_approvers(settings).remove(name):
        raise UserError(f"no approver named {name!r} (list them with: market-analyst approvers list)")


def approver_store(settings: Settings) -> ApproverStore:
    """The store a server keeps for its lifetime: it opens the file on each use, never holds it."""
    return open_approvers(settings)
