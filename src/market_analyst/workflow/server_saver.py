"""The project's checkpointer as LangGraph's server drives it (`langgraph.json`'s `checkpointer`).

LangGraph's server calls a checkpointer's async methods; the project's savers are sync (the sealed
`PostgresSaver` and the fenced Redis savers). `ThreadedSaver` runs each sync method in a worker
thread, one at a time. `ServerSaver` adds what the command line does around its runs, so that a
thread started through the server is one of the project's threads:

- the thread index: a thread gets its row before its first checkpoint (the row names the owner whose
  data key seals the thread), and the row follows the thread after each checkpoint and at the gate,
  so `threads --pending` and the web inbox list it;
- the seal: the same keyring, so `forget` reaches the thread's values and `records encrypt` seals them;
- the lease: `graphs/analyst.py` holds the thread's lease for each run the server executes
  (`thread_lease`), on the backend opened here, so a run on the server and a command on the same
  thread never write at once;
- `adelete_thread` erases as `forget` and `prune` do: the checkpoints, the data key, the row.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from market_analyst.errors import UserError
from market_analyst.ports import CheckpointBackend, ThreadRow
from market_analyst.settings import Settings
from market_analyst.state import DEFAULT_USER

# The channel under which LangGraph saves an interrupt as a pending write.
_INTERRUPT = "__interrupt__"
_log = logging.getLogger(__name__)
# The savers this process's server checkpointers hold open, by the thread (event loop) that opened
# each: `thread_lease` takes a lease on its backend, `thread_owner` reads its index.
_OPEN: dict[int, ServerSaver] = {}


class ThreadedSaver(BaseCheckpointSaver[Any]):
    """A sync saver behind LangGraph's async methods: each call runs the sync method in a worker
    thread, under one lock (the savers share one connection with their thread index)."""

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self._lock = threading.Lock()

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                return fn(*args, **kwargs)

        return await asyncio.to_thread(locked)

    async def aget_tuple(self, config: Any) -> Any:
        return await self._call(self.inner.get_tuple, config)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return await self._call(self.inner.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._call(self.inner.put_writes, config, writes, task_id, task_path)

    async def alist(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> AsyncIterator[Any]:
        listed = await self._call(
            lambda: list(self.inner.list(config, filter=filter, before=before, limit=limit))
        )
        for item in listed:
            yield item

    async def adelete_thread(self, thread_id: str) -> None:
        await self._call(self.inner.delete_thread, thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._call(self.inner.prune, thread_ids, strategy=strategy)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)


class ServerSaver(ThreadedSaver):
    """The backend's saver for LangGraph's server, keeping the thread index as the commands do."""

    def __init__(self, backend: CheckpointBackend, settings: Settings) -> None:
        super().__init__(backend.saver)
        self.backend = backend
        self.settings = settings

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return await self._call(self._put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._call(self._put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._call(self._delete, str(thread_id))

    def _put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        thread_id = str(config["configurable"]["thread_id"])
        if self.backend.index.owner(thread_id) is None:
            # Before anything of the thread is sealed: the row names the owner whose key seals it.
            self.backend.index.record(_first_row(thread_id, checkpoint, metadata, self._now()))
        saved = self.inner.put(config, checkpoint, metadata, new_versions)
        self._follow(thread_id)
        return saved

    def _put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)
        if any(channel == _INTERRUPT for channel, _ in writes):  # the thread now waits at the gate
            self._follow(str(config["configurable"]["thread_id"]))

    def _follow(self, thread_id: str) -> None:
        """The thread's row, as its saved state stands now (as each command leaves it). The write it
        follows is saved whatever happens here: a thread that cannot be described keeps its row,
        which a listing corrects or names (`threads.py`), and the log says why."""
        from market_analyst.graph import graph_over
        from market_analyst.workflow.threads import row_for, stamp
        from market_analyst.workflow.views import view_of

        try:
            view = view_of(graph_over(self.inner), thread_id)
            if view is not None:
                self.backend.index.record(row_for(view, stamp(self.settings.now())))
        except Exception as exc:
            _log.warning("thread %s: its row in the thread index was not updated: %s", thread_id, exc)

    async def owner(self, thread_id: str) -> str | None:
        """Whose thread `thread_id` is, as the thread index says (None: not one of the project's)."""
        owner: str | None = await self._call(self.backend.index.owner, thread_id)
        return owner

    def _delete(self, thread_id: str) -> None:
        """Under the thread's lease, as `forget` erases (`ThreadBusy` while a command holds it)."""
        with self.backend.lease(thread_id):
            self.backend.erase_thread(thread_id)
            self.backend.index.remove(thread_id)

    def _now(self) -> str:
        from market_analyst.workflow.threads import stamp

        return stamp(self.settings.now())


def _first_row(thread_id: str, checkpoint: Any, metadata: Any, now: str) -> ThreadRow:
    """A new thread's row, from the run's input (or the thread's metadata, which the server's auth
    handler fills with the caller) before the graph has written its state."""
    values = checkpoint.get("channel_values") or {}
    started = values.get("__start__")
    start = started if isinstance(started, dict) else {}
    user = values.get("user_id") or start.get("user_id") or (metadata or {}).get("user_id") or DEFAULT_USER
    ticker = values.get("ticker") or start.get("ticker") or ""
    return ThreadRow(thread_id, str(user), str(ticker).upper(), "in_progress", now, now)


@asynccontextmanager
async def server_checkpointer(settings: Settings | None = None) -> AsyncIterator[ServerSaver]:
    """The saver `settings` (else the environment and `.env`) describe, as the command line opens
    it, for LangGraph's server: opened when the server starts, closed when it stops."""
    from market_analyst.deps import open_checkpointer

    settings = settings or Settings.load()
    _server_tables_in_memory()
    stack = ExitStack()
    backend = await asyncio.to_thread(stack.enter_context, open_checkpointer(settings))
    owner = threading.get_ident()
    saver = _OPEN[owner] = ServerSaver(backend, settings)
    try:
        yield saver
    finally:
        _OPEN.pop(owner, None)
        await asyncio.to_thread(stack.close)


def _server_tables_in_memory() -> None:
    """Keep the in-memory runtime's own tables (`langgraph dev`) off the disk.

    Its thread records hold a copy of each thread's values and interrupts, and its runs their input;
    it writes them to `.langgraph_api/` in the directory it runs in, every ten seconds unless
    `langgraph.json` sets `disable_persistence`, and as it stops whatever the setting. There they
    would be beyond `forget`'s reach, and the server would load them again as it starts. The saver
    holds the threads; those tables are a cache of it, so they are made read-only here (a write of
    theirs does nothing), and a file an earlier server left is refused, with the way on. Nothing is
    done outside that runtime's server (the module is not loaded: another runtime, or a test)."""
    database = sys.modules.get("langgraph_runtime_inmem.database")
    if database is None:
        return
    left = Path(database.OPS_FILENAME)
    if left.exists():
        raise UserError(
            f"{left.resolve()} holds the threads and runs (with their values and input) that a LangGraph "
            f"server kept on disk, which forget cannot reach: stop the server, delete "
            f"{left.parent.resolve()}, then start it again"
        )
    database.GLOBAL_STORE.flag = "r"  # `PersistentDict.sync` writes nothing when read-only
    database.GLOBAL_RETRY_COUNTER._counters.flag = "r"


@asynccontextmanager
async def thread_lease(thread_id: str | None) -> AsyncIterator[None]:
    """Hold the thread's lease, on the backend this thread's server checkpointer opened, for the
    block (a run): `ThreadBusy` at once while a command holds it. Without a server checkpointer
    (the graph driven in-process with another saver), nothing to hold."""
    saver = _OPEN.get(threading.get_ident())
    if saver is None or not thread_id:
        yield
        return
    held = saver.backend.lease(str(thread_id))
    await asyncio.to_thread(held.__enter__)
    try:
        yield
    finally:
        await asyncio.to_thread(held.__exit__, None, None, None)


async def thread_owner(settings: Settings, thread_id: str) -> str | None:
    """Whose thread `thread_id` is, by the project's thread index: through a server checkpointer
    open in this process, else through the checkpointer opened for the question."""
    server = _OPEN.get(threading.get_ident()) or next(iter(list(_OPEN.values())), None)
    if server is not None:
        return await server.owner(thread_id)

    def opened() -> str | None:
        from market_analyst.deps import open_checkpointer

        with open_checkpointer(settings) as backend:
            return backend.index.owner(thread_id)

    return await asyncio.to_thread(opened)
