"""A memory as a point's payload and back: the one place that knows the payload's fields."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from market_analyst.persistence.memory.search import iso_z
from market_analyst.state import Memory

# Kept with the collection (see `edge.META_FILE`): which model made the dense vectors.
META_VERSION = 1


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
        "superseded": memory.superseded,
    }


def from_payload(point_id: Any, payload: dict[str, Any]) -> Memory:
    """The memory a stored point holds."""
    fields = dict(payload)
    fields["created_at"] = datetime.fromisoformat(str(fields["created_at"]).replace("Z", "+00:00"))
    return Memory(id=str(point_id), **fields)
