"""What the memory commands do: keep what a user asks to keep, list, show, replace and forget it,
and re-embed every memory after a change of model. The CLI renders what these return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from market_analyst.deps import open_memory
from market_analyst.errors import UserError
from market_analyst.market_data import normalize_ticker
from market_analyst.settings import Settings
from market_analyst.state import Memory, check_memory_ref, check_memory_text, memory_id
from market_analyst.workflow.graph_run import open_run
from market_analyst.workflow.memory_outbox import Delivery, before_erasing, sync_memories
from market_analyst.workflow.retention import unquote
from market_analyst.workflow.said_by import SaidBy
from market_analyst.workflow.stores import chosen_user


def _missing(memory_ref: str, user: str) -> UserError:
    return UserError(f"no memory {memory_ref} for user {user}")


def remember(
    settings: Settings,
    user: str | None,
    text: str,
    *,
    ticker: str | None = None,
    replaces: str | None = None,
) -> Memory:
    """Keep `text` as one of the user's memories (about `ticker`, if given). With `replaces`, the
    user's memory of that ID is kept but superseded: never recalled again, shown with `--all`.
    The same text on the same ticker kept twice is one memory."""
    owner = chosen_user(settings, user)
    text = check_memory_text(text)
    symbol = normalize_ticker(ticker) if ticker is not None else None
    old = check_memory_ref(replaces) if replaces is not None else None
    memory = Memory(
        id=memory_id("remembered", owner, symbol or "", text),
        owner=owner,
        kind="remembered",
        text=text,
        ticker=symbol,
        created_at=settings.now(),
        said_by=owner,
        verified=False,  # a name given on the command line, not a signed-in identity
        replaces=old,
    )
    store = open_memory(settings)
    kept = store.get(owner, memory.id)
    if kept is not None and kept.superseded and old is None:
        current = store.current_of(owner, memory.id)
        hint = f"; to bring it back, remember it with --replaces {current}" if current else ""
        raise UserError(f"this note was kept before as memory {memory.id} and has been replaced{hint}")
    if old is None:
        store.write([memory])
    else:
        store.replace(owner, old, memory)
    return memory


def list_memories(settings: Settings, user: str | None, *, include_superseded: bool = False) -> list[Memory]:
    """The user's memories, newest first (superseded ones too with `include_superseded`)."""
    return open_memory(settings).list(chosen_user(settings, user), include_superseded=include_superseded)


def show_memory(settings: Settings, user: str | None, memory_ref: str) -> Memory:
    """The user's memory `memory_ref`; `UserError` when the user has none of that ID."""
    owner, memory_ref = chosen_user(settings, user), check_memory_ref(memory_ref)
    memory = open_memory(settings).get(owner, memory_ref)
    if memory is None:
        raise _missing(memory_ref, owner)
    return memory


@dataclass(frozen=True)
class Forgotten:
    """What `memories forget` did: the memory erased, where its words were taken out, and the memory
    it had replaced, recalled again from now on (None when it replaced none that is kept)."""

    memory_id: str
    quoted: SaidBy
    revived: Memory | None


def forget_memory(settings: Settings, user: str | None, memory_ref: str) -> Forgotten:
    """Erase the user's memory `memory_ref`, after taking its text out of the user's threads and
    reports that quoted it; `UserError` when the user has none of that ID. Forgetting the current
    end of a chain of replacements brings back the memory it replaced."""
    owner, memory_ref = chosen_user(settings, user), check_memory_ref(memory_ref)
    store = open_memory(settings)
    with open_run(settings) as run:  # what waits goes in first: a memory erased now never comes back
        before_erasing(run, store, "memories forget")
    memory = store.get(owner, memory_ref)
    if memory is None:
        raise _missing(memory_ref, owner)
    # First the threads and reports that quoted it: a kill before the memory goes leaves it to a re-run.
    quoted = unquote(settings, {owner: [memory.text]}, why="a forgotten memory's words")
    if quoted.busy:
        raise UserError(
            f"thread(s) {', '.join(quoted.busy)} quoting memory {memory_ref} were busy; nothing was "
            "forgotten yet: run it again"
        )
    revived = store.to_revive(owner, memory_ref)
    if not store.forget(owner, memory_ref):
        raise _missing(memory_ref, owner)
    return Forgotten(memory_ref, quoted, revived)


def sync(settings: Settings) -> Delivery:
    """Copy into the memory store what decisions left waiting for it (`memories sync`)."""
    return sync_memories(settings)


def reindex_memories(settings: Settings) -> int:
    """Embed every memory again with the configured embedder; returns how many."""
    return open_memory(settings).reindex()


def check_memories(settings: Settings) -> dict[str, Any]:
    """Whether the memory store passes its full check, and its copy (`memories check`)."""
    return open_memory(settings).check()


def restore_memories(settings: Settings) -> dict[str, Any]:
    """Put the memory store's copy back in place of a store that fails its check (`memories restore`)."""
    return open_memory(settings).restore()
