"""A thread's history and LangGraph time travel: every checkpoint, oldest first, and a new thread
started from any of them (the original is never touched)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from market_analyst.errors import UserError
from market_analyst.ports import ThreadRow
from market_analyst.settings import Settings
from market_analyst.state import validate_thread_id
from market_analyst.workflow.graph_run import Progress, Run, open_run
from market_analyst.workflow.runs import advance
from market_analyst.workflow.threads import stamp
from market_analyst.workflow.upgrade import upgrade_updates
from market_analyst.workflow.views import (
    ThreadView,
    config_for,
    read_history,
    read_state,
    require_view,
    view_of,
)

# The node that runs before each one (the LLM analyst's tools run after a turn of analyze).
_RUNS_AFTER = {
    "load_profile": "__start__",
    "fetch_market_data": "load_profile",
    "analyze": "fetch_market_data",
    "tools": "analyze",
    "draft_report": "analyze",
    # At the gate, or past it: the fork starts at the gate with the same draft and asks again (the
    # static gate of earlier versions stopped before `publish`).
    "human_review": "draft_report",
    "record_decision": "draft_report",
    "publish": "draft_report",
}
# What a fork leaves behind: decisions and publications were made on the original thread.
_NOT_FORKED = ("approval", "approvals", "decision", "publication", "memory_outbox")
NO_HISTORY = (
    "this backend keeps no history: MA_REDIS_SHALLOW=true keeps only each thread's latest checkpoint, "
    "so there is nothing to list or fork from (use PostgreSQL, or Redis without MA_REDIS_SHALLOW)"
)


@dataclass(frozen=True)
class HistoryEntry:
    """One checkpoint: when, what wrote it, what it changed, and what would run next from it."""

    step: int
    source: str  # input, loop (a node finished), update (a decision or a revise was recorded)
    node: str
    at: str
    checkpoint_id: str
    next: list[str]
    changes: list[str] = field(default_factory=list)


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What a checkpoint changed that an operator cares about."""
    changes = []
    old_draft, new_draft = before.get("draft") or {}, after.get("draft") or {}
    if new_draft.get("draft_id") != old_draft.get("draft_id") and new_draft:
        changes.append(
            f"draft revision {new_draft.get('revision')} ({str(new_draft.get('recommendation')).upper()})"
        )
    if after.get("approval") != before.get("approval"):
        approval = after.get("approval")
        changes.append(
            f"decision: {approval['decision']} by {approval['by']}" if approval else "decision cleared"
        )
    if after.get("feedback") != before.get("feedback") and after.get("feedback"):
        changes.append(f"feedback: {after['feedback'][-1]}")
    if after.get("publication") and not before.get("publication"):
        changes.append(f"published: {after['publication']['key']}")
    return changes


def _writer(snapshot: Any, parent: Any) -> str:
    source = (snapshot.metadata or {}).get("source", "")
    if source == "loop" and parent is not None and parent.tasks:
        return ", ".join(sorted({task.name for task in parent.tasks}))
    return {"input": "(input)", "update": "(recorded by a command)", "fork": "(fork)"}.get(source, source)


def _no_history(run: Run) -> None:
    if not run.backend.keeps_history:
        raise UserError(NO_HISTORY)


def thread_history(settings: Settings, thread_id: str) -> list[HistoryEntry]:
    """The thread's checkpoints, oldest first."""
    validate_thread_id(thread_id)
    with open_run(settings) as run:
        _no_history(run)
        require_view(run.graph, thread_id)
        snapshots = read_history(run.graph, config_for(thread_id))[::-1]
    by_id = {s.config["configurable"]["checkpoint_id"]: s for s in snapshots}
    entries: list[HistoryEntry] = []
    previous: dict[str, Any] = {}
    for snapshot in snapshots:
        parent_id = (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        parent = by_id.get(parent_id)
        entries.append(
            HistoryEntry(
                step=int((snapshot.metadata or {}).get("step", -1)),
                source=str((snapshot.metadata or {}).get("source", "")),
                node=_writer(snapshot, parent),
                at=str(snapshot.created_at),
                checkpoint_id=snapshot.config["configurable"]["checkpoint_id"],
                next=list(snapshot.next),
                changes=_changes(previous, snapshot.values or {}),
            )
        )
        previous = snapshot.values or {}
    return entries


def fork_thread(
    settings: Settings,
    thread_id: str,
    checkpoint_id: str,
    *,
    new_thread_id: str | None = None,
    progress: Progress | None = None,
) -> ThreadView:
    """A new thread that starts from one of `thread_id`'s checkpoints and runs to the gate; any decision
    and publication there are left behind, so the new thread's draft needs an approval of its own."""
    validate_thread_id(thread_id)
    new_thread_id = validate_thread_id(new_thread_id) if new_thread_id else str(uuid.uuid4())
    with open_run(settings, new_thread_id, progress=progress) as run:
        _no_history(run)
        if view_of(run.graph, new_thread_id) is not None:
            raise UserError(f"thread {new_thread_id} already has a run; fork into a new thread ID")
        at = {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id, "checkpoint_ns": ""}}
        snapshot = read_state(run.graph, at)
        see = f"see 'market-analyst history {thread_id}'"
        if snapshot.metadata is None or snapshot.config["configurable"].get("checkpoint_id") != checkpoint_id:
            raise UserError(f"thread {thread_id} has no checkpoint {checkpoint_id} ({see})")
        if not snapshot.values or not snapshot.next or snapshot.next[0] not in _RUNS_AFTER:
            raise UserError(
                f"checkpoint {checkpoint_id} has nothing left to run; fork from one with a next node ({see})"
            )
        values = {k: v for k, v in snapshot.values.items() if k not in _NOT_FORKED}
        values.update(upgrade_updates(run, thread_id, checkpoint_id))  # the new thread is this version's
        now = stamp(settings.now())
        values["started_at"] = now
        ticker, user_id = str(values.get("ticker", "")), str(values.get("user_id", ""))
        # Listed from the start, as `analyze` does, so that a fork stopped half-way is still found
        # by `threads`, `prune` and `forget`.
        run.backend.index.record(ThreadRow(new_thread_id, user_id, ticker, "in_progress", now, now))
        # Written as if the node before the checkpoint's next one had just finished: the new thread
        # carries on from where the original stood then.
        run.graph.update_state(config_for(new_thread_id), values, as_node=_RUNS_AFTER[snapshot.next[0]])
        # Forked at the gate, the run goes straight into it and waits for a decision of its own.
        view = advance(run, None, new_thread_id, progress, ticker=ticker or "TICKER")
    view.extra = {"forked_from": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}
    return view
