"""Threads bench: `threads --pending` over N threads (10,000 by default), on PostgreSQL and on Redis,
through the thread index, side by side with a reader that loads every thread's state to filter it.

The threads are real states (one drafted run per ticker, made by the real graph), written N times
through the saver; a third have a decision (published or rejected), the rest wait for approval."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_archive import PAGE, TICKERS, drafted_states, median_time

from market_analyst.deps import build_deps
from market_analyst.persistence.postgres.embedded import discard_embedded_postgres, embedded_postgres_uri
from market_analyst.settings import Settings
from market_analyst.workflow.graph_run import open_run
from market_analyst.workflow.threads import list_threads, record
from market_analyst.workflow.views import view_of

REPO = Path(__file__).resolve().parent.parent


def seed(settings: Settings, n: int) -> None:
    """N threads in the store, each with its index row."""
    deps = build_deps(settings)
    states = drafted_states(deps)
    with open_run(settings) as run:
        for i in range(n):
            thread_id = f"bench-{i:06d}"
            config = {"configurable": {"thread_id": thread_id}}
            values = dict(states[TICKERS[i % len(TICKERS)]], user_id=f"user{i % 50}")
            run.graph.update_state(config, values, as_node="draft_report")
            if i % 3 != 1:  # waiting: the gate has asked its question
                run.graph.invoke(None, config, context=deps)
            else:  # a decision recorded and the run ended: published or rejected
                decision = "approved" if i % 2 else "rejected"
                approval = {
                    "decision": decision,
                    "by": "bench",
                    "at": "2025-02-15T00:00:00+00:00",
                    "note": "",
                    "draft_id": values["draft"]["draft_id"],
                }
                publication = {"key": f"k-{i}", "operation_id": f"{thread_id}:x", "created": True}
                run.graph.update_state(
                    config,
                    {"approval": approval, "publication": publication if decision == "approved" else None},
                    as_node="publish",
                )
            record(run, thread_id)
        run.backend.index.mark_complete()


def naive_pending(settings: Settings) -> list[str]:
    """Every thread's state loaded, the waiting ones kept, the newest `PAGE` of them."""
    with open_run(settings) as run:
        views = [view_of(run.graph, t) for t in run.backend.thread_ids()]
    waiting = [v for v in views if v is not None and v.status == "awaiting_approval"]
    return [
        v.thread_id for v in sorted(waiting, key=lambda v: (v.updated_at or "", v.thread_id), reverse=True)
    ][:PAGE]


@contextmanager
def _postgres(tmp: Path) -> Iterator[dict[str, str]]:
    pgdata = tmp / "server"
    try:
        yield {"POSTGRES_URL": embedded_postgres_uri(pgdata)}
    finally:
        discard_embedded_postgres(pgdata)


@contextmanager
def _redis(tmp: Path) -> Iterator[dict[str, str]]:
    sys.path.insert(0, str(REPO))
    from tests.support.services import RedisServer

    server = RedisServer(tmp / "redis").start()
    try:
        yield {"MA_CHECKPOINTER": "redis", "REDIS_URL": server.url}
    finally:
        server.stop()


def run(n: int = 10_000, repeat: int = 3) -> None:
    """Print, per backend, the listing through the index against the naive reader."""
    print(f"threads: 'threads --pending' over {n:,} threads (two thirds waiting), the newest {PAGE} shown")
    for name, store in (("postgres", _postgres), ("redis", _redis)):
        with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp, store(Path(tmp)) as env:
            settings = Settings.load(environ={"MA_DATA_DIR": str(Path(tmp) / "data")} | env, dotenv=None)
            started = time.perf_counter()
            seed(settings, n)
            print(f"  {name}: wrote {n:,} threads in {time.perf_counter() - started:.1f} s")
            t_index, page = median_time(
                lambda s=settings: list_threads(s, statuses=("awaiting_approval",), limit=PAGE), repeat
            )
            t_naive, want = median_time(lambda s=settings: naive_pending(s), 1)
            got = [row.thread_id for row in page.rows]
            assert got and set(got) == set(want), "the two readers disagree, or nothing waits"
            print(
                f"  {name:<9} index {t_index * 1000:8.1f} ms   every state {t_naive * 1000:9.1f} ms   "
                f"ratio {t_naive / t_index:6.1f}x   ({page.more:,} more waiting)"
            )


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
