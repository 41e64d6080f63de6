"""The memory outbox: a decision is recorded whether or not the memory store can be written.

What a thread's decisions and publication leave to remember (the approval note, the rejection
reason, the revise feedback, the published report) is saved in the thread itself, with the step that
recorded it (`nodes.record_decision.outboxed`), and copied into the memory store afterwards. The
memory IDs derive from what caused them, so a copy made twice is one memory.

The thread index keeps, per thread, the first outbox entry the store may lack: set (`hold`) before a
command advances the thread under its lease, cleared (`deliver`) once the store holds every entry
from there. The command that advanced the thread copies them as it ends, without waiting for the
store; a store that cannot take them now (held by another process, damaged, away) leaves them
waiting, for the next command that opens the store or for `memories sync`. An erasure copies what
waits first, so that it erases that too and nothing erased comes back afterwards.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from market_analyst.errors import SealedValueUnreadable, ServiceUnavailable, ThreadBusy, UserError
from market_analyst.nodes.record_decision import UNANSWERED
from market_analyst.ports import MemoryStore
from market_analyst.settings import Settings
from market_analyst.state import Memory, memory_id
from market_analyst.workflow.graph_run import Run, open_run
from market_analyst.workflow.views import config_for

OUTBOX = "memory_outbox"
Hold = tuple[int, str]  # a thread's waiting mark: the first outbox entry it waits on, and its token
WAITING = "recorded; its memory will be written when the store is free ('market-analyst memories sync')"


@dataclass
class Delivery:
    """What one copy of the outboxes into the memory store did."""

    written: int = 0
    waiting: list[str] = field(default_factory=list)  # threads whose memories the store could not take
    busy: list[str] = field(default_factory=list)  # threads another command advances (it copies them)
    refused: int = 0  # entries the workflow did not write (put into the state by hand): never copied
    unreadable: list[str] = field(default_factory=list)  # threads sealed under a key this process lacks
    why: str | None = None  # why the store took nothing, in one line


def _values(run: Run, thread_id: str) -> dict[str, Any]:
    saved = run.backend.saver.get_tuple(config_for(thread_id))
    return dict(saved.checkpoint.get("channel_values") or {}) if saved is not None else {}


def hold(run: Run, thread_id: str) -> Hold:
    """Before `run` advances the thread (under its lease): whatever its outbox gains from here waits
    for the store until it is copied (`deliver`)."""
    start = len(_values(run, thread_id).get(OUTBOX) or [])
    token = run.backend.index.hold_memories(thread_id, start)
    return run.backend.index.memory_hold(thread_id) or (start, token)


def _genuine(entry: Any, thread_id: str, owner: Any) -> Memory | None:
    """The outbox entry as a memory, if it is one the workflow writes for this thread's owner: its ID
    derived from its source, as `record_decision` and `publish` derive it."""
    try:
        memory = Memory.model_validate(entry)
    except ValidationError:
        return None
    if memory.owner != owner or memory.thread_id != thread_id:
        return None
    if memory.kind == "report":
        expected = memory_id("report", memory.archive_key or "")
    else:
        expected = memory_id(memory.kind, thread_id, memory.draft_id or "", memory.said_by or "")
    return memory if memory.id == expected else None


# A copy takes the leases of at most this many threads at once (a PostgreSQL lease is a connection),
# and opens the store once for all of them.
BATCH = 16
Claim = Callable[[list[str]], AbstractContextManager[list[str]]]


def deliver(
    run: Run,
    store: MemoryStore,
    threads: Iterable[str] | None = None,
    *,
    held: Hold | None = None,
    claim: Claim | None = None,
) -> Delivery:
    """Copy the waiting outbox entries of `threads` (every thread that has some, if None) into
    `store`. `held`: the caller holds the one thread's lease, and this is its hold.

    Otherwise each thread's lease is taken for its copy (a thread another command advances is left
    to it): an erasure, which copies what waits first under the same leases, never runs beside a
    copy that could write back what it erases. Threads are copied BATCH at a time, with the store
    opened once per batch; `claim` (a server's) yields which threads of a batch it may take now,
    and holds off its own decisions on them meanwhile. A thread is released only if no command held
    it since (the hold's token is unchanged). Only entries the store does not hold yet are written,
    so a copy made again changes nothing (a memory replaced since stays replaced)."""
    done = Delivery()
    wanted = list(threads) if threads is not None else list(run.backend.index.held_memories())
    if held is not None:
        [thread_id] = wanted
        _copy_batch(run, store, [(thread_id, held)], done)
        return done
    for start in range(0, len(wanted), BATCH):
        with (claim or _all)(wanted[start : start + BATCH]) as claimed, ExitStack() as leases:
            holds: list[tuple[str, Hold]] = []
            for thread_id in claimed:
                try:
                    leases.enter_context(run.backend.lease(thread_id))
                except ThreadBusy:
                    done.busy.append(thread_id)
                    continue
                hold = run.backend.index.memory_hold(thread_id)
                if hold is not None:
                    holds.append((thread_id, hold))
            if not _copy_batch(run, store, holds, done):
                done.waiting += wanted[start + BATCH :]  # the store took nothing: the rest wait too
                break
    return done


@contextmanager
def _all(threads: list[str]) -> Iterator[list[str]]:
    yield threads


def _copy_batch(run: Run, store: MemoryStore, holds: list[tuple[str, Hold]], done: Delivery) -> bool:
    """The waiting entries of the threads of `holds` (their leases held) into the store, in one
    write, then each thread's hold released; False (the threads waiting) when the store took
    nothing."""
    memories: list[Memory] = []
    taken: list[tuple[str, str]] = []  # (thread, token) to release once the store holds its entries
    for thread_id, (start, token) in holds:
        try:
            values = _values(run, thread_id)
        except SealedValueUnreadable:  # another records store's key (an erasure removes its own)
            done.unreadable.append(thread_id)
            continue
        entries = list(values.get(OUTBOX) or [])[start:]
        genuine = [m for m in (_genuine(e, thread_id, values.get("user_id")) for e in entries) if m]
        done.refused += len(entries) - len(genuine)
        memories += genuine
        taken.append((thread_id, token))
    if memories:
        try:
            by_owner: dict[str, list[str]] = {}
            for memory in memories:
                by_owner.setdefault(memory.owner, []).append(memory.id)
            kept = set().union(*(store.kept(owner, ids) for owner, ids in by_owner.items()))
            missing = [m for m in memories if m.id not in kept]
            if missing:
                store.write(missing)
        except UNANSWERED as exc:
            done.waiting += [thread_id for thread_id, _ in taken]
            done.why = " ".join(str(exc).split()) or type(exc).__name__
            return False
        done.written += len(missing)
    for thread_id, token in taken:
        run.backend.index.release_memories(thread_id, token)
    return True


def catch_up(run: Run, store: MemoryStore) -> Delivery:
    """Copy every waiting outbox entry into `store`: one read of the index when nothing waits."""
    if not run.backend.index.held_memories():
        return Delivery()
    return deliver(run, store)


# How long an erasure waits for threads that other commands are advancing to copy their memories:
# each such command copies them as it ends, within a second or two.
ERASURE_WAIT_SECONDS = 30.0


def before_erasing(run: Run, store: MemoryStore, command: str, *, wait: float = ERASURE_WAIT_SECONDS) -> None:
    """Copy what waits into the store before an erasure, so that the erasure reaches it too (and a
    memory erased now is never copied in afterwards); `UserError` when some of it cannot be copied,
    or when the store fails its full check (an erasure never starts on a damaged store: not in the
    threads that quote a memory, not in the store). Threads that other commands are advancing (their
    command copies their memories as it ends) are waited for in turn, up to `wait` seconds, saying so
    on the log once."""
    store.verify()
    deadline = time.monotonic() + wait
    pause = 0.1
    said = False
    while True:
        done = catch_up(run, store)
        if done.waiting:
            raise UserError(
                f"the memories of {len(done.waiting)} thread(s) wait for the memory store ({done.why}); "
                f"nothing was erased: run {command} again when the store is free"
            )
        if not done.busy:
            return
        if time.monotonic() >= deadline:  # their command copies them when it ends, perhaps after this
            raise UserError(
                f"thread(s) {', '.join(done.busy)} are being advanced and their memories wait for the "
                f"store (waited {wait:g} s); nothing was erased: run {command} again when they end"
            )
        if not said:
            _log.warning(
                "%s waits for %d thread(s) being advanced to copy their memories", command, len(done.busy)
            )
            said = True
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def sync_memories(
    settings: Settings, store: MemoryStore | None = None, *, claim: Claim | None = None
) -> Delivery:
    """Copy every waiting outbox entry into the memory store (`memories sync`, a server after each
    decision). Opens the checkpointer; builds no adapter when nothing waits."""
    from market_analyst.deps import open_memory

    with open_run(settings) as run:
        if not run.backend.index.held_memories():
            return Delivery()
        return deliver(run, store or open_memory(settings), claim=claim)


# A server copies what its decisions left once they pause this long, and at most this long after the
# first of them (a steady stream of decisions still has its memories written every few seconds).
QUIET_SECONDS = 0.25
LONGEST_SECONDS = 2.0
RETRY_SECONDS = 5.0  # a copy that found the store or a thread held tries again this much later
RETRY_MAX_SECONDS = 60.0  # and, while copies keep failing (a store down), twice as late each time, to this


class Afterwards:
    """Copies what waits into the memory store in a thread of its own, for a server that answers a
    decision before its memory is written: one copy at a time, and one more queued at most (it
    copies whatever waits by then). The store, and its embedder's model, are kept between copies.
    A server killed before a copy leaves the memories waiting: the next command copies them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: MemoryStore | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-outbox")
        self._guard = threading.Lock()
        self._queued = False
        self._first = self._last = 0.0
        self._retry_timer: threading.Timer | None = None  # one retry waits at a time
        self._failed = 0  # copies in a row that could not finish
        # A copy holds each thread's lease while it copies it: this server's own decisions do not
        # run beside a copy of their thread (they would find it busy). A decision waits for the
        # batch that holds its thread; a copy leaves the threads being decided to their decisions,
        # each of which asks for a copy again as it ends. Decisions on other threads go on.
        self._turns = threading.Condition()
        self._deciding: dict[str, int] = {}
        self._copying: set[str] = set()

    @contextmanager
    def deciding(self, thread_id: str) -> Iterator[None]:
        """Hold off this server's copy of the thread for the block (a decision on it): it waits
        for a copy of the thread running now."""
        with self._turns:
            self._turns.wait_for(lambda: thread_id not in self._copying)
            self._deciding[thread_id] = self._deciding.get(thread_id, 0) + 1
        try:
            yield
        finally:
            with self._turns:
                self._deciding[thread_id] -= 1
                if not self._deciding[thread_id]:
                    del self._deciding[thread_id]
                self._turns.notify_all()

    @contextmanager
    def _claim(self, threads: list[str]) -> Iterator[list[str]]:
        """The threads of a batch that no decision of this server holds, held off from its decisions
        for the block."""
        with self._turns:
            claimed = [thread_id for thread_id in threads if thread_id not in self._deciding]
            self._copying.update(claimed)
        try:
            yield claimed
        finally:
            with self._turns:
                self._copying.difference_update(claimed)
                self._turns.notify_all()

    def soon(self) -> None:
        """Copy what waits once decisions pause for QUIET_SECONDS (at most LONGEST_SECONDS after this
        call), and after the copy running now, if any: a burst of decisions is one copy, so the
        store is opened and flushed once for all of them, and the copy does not slow the burst."""
        with self._guard:
            self._last = time.monotonic()
            if self._queued:
                return
            self._queued, self._first = True, self._last
        self._pool.submit(self._copy)

    def _copy(self) -> None:
        while True:
            with self._guard:
                now = time.monotonic()
                due = min(self._last + QUIET_SECONDS, self._first + LONGEST_SECONDS)
                if now >= due:
                    self._queued = False
                    break
            time.sleep(due - now)
        try:
            if self._store is None:
                from market_analyst.deps import open_memory

                self._store = open_memory(self.settings)
                self._store.embedder.embed(["loaded before any thread is held"])  # the model, once
            # Without waiting for a held store (each thread's lease is held while it is copied).
            done = sync_memories(self.settings, self._store.at_once(), claim=self._claim)
            if done.waiting or done.busy:  # again in a while: nothing else would copy them soon
                _log.warning("memories wait for the store: %s", done.why or "threads busy")
                self._retry()
            else:
                with self._guard:
                    self._failed = 0
        except ServiceUnavailable as exc:  # a store is down: an outage, said in one line, not a fault
            _log.warning("memories wait for a store: %s", exc)
            self._retry()
        except Exception:  # the memories stay waiting, for the next decision or `memories sync`
            _log.exception("copying the memory outbox failed")

    def _retry(self) -> None:
        """Copy again later: nothing else would copy what waits soon. One retry waits at a time
        (however many decisions asked for copies that failed), RETRY_SECONDS after the first failed
        copy and twice as long after each next one, up to RETRY_MAX_SECONDS."""
        with self._guard:
            if self._retry_timer is not None:
                return
            delay = min(RETRY_SECONDS * 2**self._failed, RETRY_MAX_SECONDS)
            self._failed += 1
            self._retry_timer = threading.Timer(delay, self._retried)
            self._retry_timer.daemon = True
            self._retry_timer.start()

    def _retried(self) -> None:
        with self._guard:
            self._retry_timer = None
        try:
            self.soon()
        except RuntimeError:  # the server is shutting down: what waits is copied by the next command
            pass

    def wait(self) -> None:
        """Let every copy queued so far finish (a server shutting down, a test)."""
        self._pool.submit(lambda: None).result()


_log = logging.getLogger(__name__)
