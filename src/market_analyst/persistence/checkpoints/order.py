"""Checkpoint IDs that follow their thread, whatever the host's clock says.

LangGraph names each checkpoint with a time-based UUID (version 6), made from the clock of the
process that writes it and kept increasing within that process only; the savers take a thread's
latest checkpoint as the one whose ID sorts last. A process whose clock is behind the one that wrote
the thread's last checkpoint (a host 2 h slow, a backward NTP step) would name its checkpoints
before their parent: the thread would read as the parent again, its decision lost from view while
its report is out.

So the order is corrected, not refused: every read of a thread's checkpoint through the project's
savers moves this process's UUID clock (LangGraph's own `_last_v6_timestamp`, which keeps its IDs
increasing) to that checkpoint's time, and the next ID made follows it by one tick, as an ID made
just after it on the same host would. A correction keeps the thread working on a host whose clock
nobody can fix at once, and the order stays causal. The times a person reads (the checkpoint's `ts`,
a decision's `at`) come from the clock as it is. Should a write still come out of order (a clock
stepped back while another thread of the same process read), `put` refuses it in one line before
anything of it is written (`refuse_out_of_order`)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from market_analyst.errors import UserError

_UUID_EPOCH = datetime(1582, 10, 15, tzinfo=UTC)
_lock = threading.Lock()


def _timestamp(checkpoint_id: Any) -> int | None:
    """The 100-ns ticks since 1582 that a version-6 UUID carries; None for any other ID."""
    try:
        value = UUID(str(checkpoint_id))
    except ValueError:
        return None
    if value.version != 6:
        return None
    number = value.int
    return (((number >> 80) & 0xFFFFFFFFFFFF) << 12) | ((number >> 64) & 0x0FFF)


def follow(checkpoint_id: Any) -> None:
    """Make the checkpoint IDs this process makes next sort after `checkpoint_id`."""
    stamp = _timestamp(checkpoint_id)
    if stamp is None:
        return
    from langgraph.checkpoint.base import id as ids

    with _lock:
        if ids._last_v6_timestamp is None or ids._last_v6_timestamp < stamp:
            ids._last_v6_timestamp = stamp  # type: ignore[assignment]  # upstream annotates it None


def followed(found: Any) -> Any:
    """`found` (a saver's `CheckpointTuple`, or None), its checkpoint followed: what `get_tuple` returns."""
    if found is not None:
        follow((found.config.get("configurable") or {}).get("checkpoint_id"))
    return found


def refuse_out_of_order(config: Any, checkpoint: Any) -> None:
    """Before a checkpoint is written: refuse one whose ID does not sort after its parent's."""
    parent = ((config or {}).get("configurable") or {}).get("checkpoint_id")
    mine, theirs = _timestamp(checkpoint.get("id")), _timestamp(parent)
    if mine is None or theirs is None or mine > theirs:
        return
    behind = timedelta(seconds=round((theirs - mine) / 10_000_000))
    made = (_UUID_EPOCH + timedelta(microseconds=theirs // 10)).isoformat(timespec="seconds")
    thread = config["configurable"].get("thread_id", "")
    raise UserError(
        f"this host's clock is {behind} behind the last step of thread {thread} (made at {made}): its "
        f"next step was not written; correct the clock, then run 'market-analyst resume {thread}'"
    )
