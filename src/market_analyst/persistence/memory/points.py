"""A memory as a point's payload and back: the one place that knows the payload's fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from market_analyst.state import Memory

# Kept with the collection (see `edge.META_FILE`): which model made the dense vectors.
META_VERSION = 1
# Whether a memory is recalled, as a keyword: Edge 0.9.0's Python binding turns `MatchValue(True)`
# into the integer 1, so a boolean payload field cannot be filtered on (checked: a `True` point
# matches neither `True` nor `False`).
LIVE, SUPERSEDED = "live", "superseded"


def to_payload(memory: Memory) -> dict[str, Any]:
    """The payload stored for `memory` (the ID is the point's own)."""
    return {
        "owner": memory.owner,
        "kind": memory.kind,
        "text": memory.text,
        "ticker": memory.ticker,
        "created_at": iso_z(memory.created_at),
        "thread_id": memory.thread_id,
        "draft_id": memory.draft_id,
        "archive_key": memory.archive_key,
        "said_by": memory.said_by,
        "verified": memory.verified,
        "replaces": memory.replaces,
        "status": SUPERSEDED if memory.superseded else LIVE,
    }


def from_payload(point_id: Any, payload: dict[str, Any]) -> Memory:
    """The memory a stored point holds."""
    fields = dict(payload)
    fields["superseded"] = fields.pop("status", LIVE) == SUPERSEDED
    fields["created_at"] = datetime.fromisoformat(str(fields["created_at"]).replace("Z", "+00:00"))
    return Memory(id=str(point_id), **fields)


def iso_z(moment: datetime) -> str:
    """`moment` as the UTC ISO time the payload stores (`2026-01-31T09:30:00.123456Z`)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
