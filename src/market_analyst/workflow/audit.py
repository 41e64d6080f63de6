"""What `audit list|verify|export` do: read the audit log of decisions and publications."""

from __future__ import annotations

from typing import Any

from market_analyst.deps import open_audit
from market_analyst.errors import UserError
from market_analyst.settings import Settings
from market_analyst.state import validate_thread_id

EXPORT_FORMATS = ("jsonl", "csv")


class AuditBroken(UserError):
    """`audit verify` found an entry that does not match the chain."""


def audit_entries(settings: Settings, thread_id: str | None = None) -> list[dict[str, Any]]:
    """Every entry in order, or only those of `thread_id`, with their personal content."""
    if thread_id is not None:
        validate_thread_id(thread_id)
    return open_audit(settings).entries(thread_id)


def verify_audit(settings: Settings) -> tuple[int, int]:
    """Recompute the chain; (entries, erased entries) when it holds, else `AuditBroken` naming the
    first entry that does not match."""
    found = open_audit(settings).verify()
    if found.problem is not None:
        raise AuditBroken(f"the audit log does not verify: {found.problem}")
    return found.entries, found.erased


def export_audit(settings: Settings, fmt: str) -> str:
    """The whole log as JSON lines or CSV."""
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"unknown format {fmt!r}: use jsonl or csv")
    return open_audit(settings).export(fmt)
