"""Where a thread stands, read from its saved state, and the refusals that follow from it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from market_analyst.choices import ThreadStatus
from market_analyst.errors import SealedValueUnreadable, UserError


class UnreadableThread(UserError):
    """A thread whose saved state holds a type this program does not load: commands on it refuse,
    listings show what the index last recorded for it and go on."""


@dataclass
class ThreadView:
    """A thread as the saved state describes it."""

    thread_id: str
    status: ThreadStatus
    next: list[str]
    ticker: str | None = None
    user_id: str | None = None
    draft: dict[str, Any] | None = None
    approval: dict[str, Any] | None = None
    publication: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    drafted_at: str | None = None  # when the draft was made (UTC ISO)
    started_at: str | None = None  # when the thread started
    updated_at: str | None = None  # when its latest checkpoint was written
    request: dict[str, Any] | None = None  # the gate's decision request (decisions.DecisionRequest)
    approvals: list[dict[str, Any]] = field(default_factory=list)  # approvals of the draft so far
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The view as plain data for `--json`."""
        data = asdict(self)
        data.pop("extra")
        data.update(self.extra)
        return data


def config_for(thread_id: str) -> dict[str, Any]:
    """The run configuration that names a thread."""
    return {"configurable": {"thread_id": thread_id}}


def _status(
    snapshot: Any, values: dict[str, Any], submitted: dict[str, Any] | None
) -> tuple[ThreadStatus, list[str]]:
    """Where the thread stands. `submitted` is a decision sent to the gate whose run did not finish
    (the process died after LangGraph saved it): `resume` applies it, so it is never asked for again."""
    next_nodes = list(snapshot.next)
    approval = values.get("approval")
    if next_nodes == ["human_review"]:
        if submitted is not None:
            approving = submitted.get("action") == "approve"
            return ("approved_pending_publish" if approving else "in_progress"), next_nodes
        if snapshot.interrupts:
            expired = (values.get("expired") or {}).get("draft_id")
            if expired and expired == (values.get("draft") or {}).get("draft_id"):
                return "expired", next_nodes
            return "awaiting_approval", next_nodes
        return "in_progress", next_nodes
    if next_nodes == ["record_decision"]:
        approving = (values.get("decision") or {}).get("action") == "approve"
        return ("approved_pending_publish" if approving else "in_progress"), next_nodes
    if next_nodes == ["publish"]:
        approved = approval is not None and approval.get("decision") == "approved"
        # Without an approval this is a thread paused by the static gate of an earlier version, which
        # stopped before `publish` itself: a decision moves it into the gate first (runs.decide).
        return ("approved_pending_publish" if approved else "awaiting_approval"), next_nodes
    if not next_nodes and snapshot.tasks:
        # The tasks of the latest checkpoint finished and their writes were saved, but the process
        # died (or its store went away) before the next checkpoint: `next` is empty, yet `resume`
        # applies the writes and goes on. The gate's writes holding an approval are that approval.
        names = [task.name for task in snapshot.tasks]
        return ("approved_pending_publish" if _approved_by(snapshot.tasks) else "in_progress"), names
    if next_nodes:
        return "in_progress", next_nodes
    if values.get("publication"):
        return "published", next_nodes
    if approval and approval.get("decision") == "rejected":
        return "rejected", next_nodes
    return "ended", next_nodes


# What LangGraph announces when strict deserialisation leaves a value unread: a type, or a method
# (such as `fromisoformat` on a datetime subclass) outside the allow-list.
_BLOCKED = ("msgpack_blocked", "msgpack_method_blocked")


def read_state(graph: Any, config: dict[str, Any]) -> Any:
    """The graph's state at `config`, refusing a checkpoint that holds a type strict deserialisation
    would not load (it would come back as a bare dict and be read wrongly)."""
    with _refusing_unloaded(config) as check:
        snapshot = check(graph.get_state(config))
    return snapshot


def read_history(graph: Any, config: dict[str, Any], limit: int | None = None) -> list[Any]:
    """The thread's checkpoints, newest first (at most `limit`), refused as `read_state` refuses."""
    with _refusing_unloaded(config) as check:
        snapshots = [check(s) for s in graph.get_state_history(config, limit=limit)]
    return snapshots


def saved_values(saver: Any, thread_id: str) -> list[tuple[str, Any]]:
    """Every value the thread's checkpoints and pending writes hold, opened, with its channel (what
    an erasure searches), refused as `read_state` refuses: `UnreadableThread` when one cannot be read."""
    config = config_for(thread_id)
    values: list[tuple[str, Any]] = []
    with _refusing_unloaded(config):
        for saved in saver.list(config):
            values.extend((saved.checkpoint.get("channel_values") or {}).items())
            values.extend((channel, value) for _task, channel, value in saved.pending_writes or ())
    return values


@contextmanager
def _refusing_unloaded(config: dict[str, Any]) -> Iterator[Callable[[Any], Any]]:
    """Reads in this block that strict deserialisation left unloaded raise `UnreadableThread` at its end;
    the block passes each snapshot it reads through the callable it is given."""
    from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener

    blocked: list[str] = []
    reader = threading.get_ident()

    def listen(event: Any) -> None:
        # The hook is process-wide: only this thread's reads count (the web server reads in a pool).
        if event.get("kind") in _BLOCKED and threading.get_ident() == reader:
            blocked.append(f"{event.get('module')}.{event.get('name')}")

    def check(snapshot: Any) -> Any:
        blocked.extend(_unrevived(snapshot.values))
        return snapshot

    unregister = register_serde_event_listener(listen)
    try:
        yield check
    except SealedValueUnreadable as exc:
        thread_id = config["configurable"]["thread_id"]
        raise UnreadableThread(f"thread {thread_id} cannot be read: {exc}") from None
    finally:
        unregister()
    if blocked:
        thread_id, types = config["configurable"]["thread_id"], ", ".join(sorted(set(blocked)))
        raise UnreadableThread(
            f"thread {thread_id} holds data of a type this program does not load ({types}); it was refused "
            "rather than read wrongly (LANGGRAPH_STRICT_MSGPACK=true)"
        )


def _unrevived(value: Any) -> list[str]:
    """Objects a JSON-stored checkpoint (Redis) holds that its serializer would not rebuild: they come
    back as constructor envelopes naming their type."""
    if isinstance(value, dict):
        if value.get("lc") in (1, 2) and value.get("type") in ("constructor", "not_implemented"):
            return [".".join(str(part) for part in value.get("id") or [])]
        return [name for item in value.values() for name in _unrevived(item)]
    if isinstance(value, list | tuple):
        return [name for item in value for name in _unrevived(item)]
    return []


def _approved_by(tasks: Any) -> bool:
    """Whether the finished tasks whose writes wait for the next checkpoint passed the gate with an
    approval: the gate's own decision, the approval `record_decision` recorded, or `publish` itself."""
    for task in tasks:
        written = task.result if isinstance(task.result, dict) else {}
        if task.name == "human_review" and (written.get("decision") or {}).get("action") == "approve":
            return True
        if task.name == "record_decision" and (written.get("approval") or {}).get("decision") == "approved":
            return True
        if task.name == "publish":
            return True
    return False


def submitted_decision(graph: Any, snapshot: Any) -> dict[str, Any] | None:
    """The decision a `Command(resume=...)` saved at the gate's checkpoint and no run has applied yet
    (its command was killed on the way), or None."""
    if list(snapshot.next) != ["human_review"] or graph.checkpointer is None:
        return None
    saved = graph.checkpointer.get_tuple(snapshot.config)
    writes = list(saved.pending_writes or []) if saved else []
    if any(channel == "__error__" for _task, channel, _value in writes):
        return None  # the gate refused it (an invalid resume value): the question is still open
    for _task, channel, value in writes:
        if channel == "__resume__" and isinstance(value, dict):
            return value
    return None


def view_of(graph: Any, thread_id: str) -> ThreadView | None:
    """The thread's view, or None when no checkpoint names it."""
    snapshot = read_state(graph, config_for(thread_id))
    if snapshot.metadata is None and not snapshot.values:
        return None
    values = snapshot.values or {}
    submitted = submitted_decision(graph, snapshot)
    status, next_nodes = _status(snapshot, values, submitted)
    request = None
    if status in ("awaiting_approval", "expired") and snapshot.interrupts:
        request = snapshot.interrupts[0].value
    elif status == "awaiting_approval" and values.get("draft"):
        # Paused by an earlier version's static gate, which asked nothing: what this version's gate
        # will ask once the first decision moves the thread into it (`runs.decide`).
        from market_analyst.decisions import DecisionPolicy
        from market_analyst.nodes.human_review import decision_request

        request = decision_request(values, thread_id, DecisionPolicy()).model_dump(mode="json")  # type: ignore[arg-type]
    return ThreadView(
        thread_id=thread_id,
        status=status,
        next=next_nodes,
        ticker=values.get("ticker"),
        user_id=values.get("user_id"),
        draft=values.get("draft"),
        approval=values.get("approval"),
        publication=values.get("publication"),
        checkpoint_id=(snapshot.config or {}).get("configurable", {}).get("checkpoint_id"),
        drafted_at=values.get("drafted_at"),
        started_at=values.get("started_at"),
        updated_at=snapshot.created_at,
        request=request,
        approvals=list(values.get("approvals") or []),
    )


def require_view(graph: Any, thread_id: str) -> ThreadView:
    """The thread's view, or `UserError` naming the unknown thread."""
    view = view_of(graph, thread_id)
    if view is None:
        raise UserError(
            f"unknown thread {thread_id}: no run has that ID (start one with: market-analyst analyze TICKER)"
        )
    return view


def _finished_refusal(view: ThreadView, action: str) -> UserError | None:
    if view.status == "published":
        key = (view.publication or {}).get("key")
        return UserError(
            f"thread {view.thread_id} was already published (archive key {key}); nothing to {action}"
        )
    if view.status == "rejected":
        approval = view.approval or {}
        return UserError(
            f"thread {view.thread_id} was rejected by {approval.get('by')} at {approval.get('at')} "
            f"({approval.get('note')}); nothing to {action}"
        )
    if view.status == "ended":
        return UserError(f"thread {view.thread_id} has ended; nothing to {action}")
    if view.status == "in_progress":
        return UserError(
            f"thread {view.thread_id} is not at the approval gate yet: the next node is {view.next[0]}; "
            f"continue it with 'market-analyst resume {view.thread_id}'"
        )
    return None


def decidable_view(graph: Any, thread_id: str, action: str, *, approved_ok: bool = False) -> ThreadView:
    """The thread's view if a decision on its draft can be made now; otherwise `UserError` saying why."""
    view = require_view(graph, thread_id)
    refusal = _finished_refusal(view, action)
    if refusal:
        raise refusal
    if view.status == "approved_pending_publish" and not approved_ok:
        raise UserError(
            f"thread {thread_id} is already approved and waits to publish; "
            f"finish it with 'market-analyst resume {thread_id}'"
        )
    assert view.draft is not None
    return view
