"""`market-analyst analyze` from process start to the approval gate for a user with 1,000 memories,
against the same user with none (side by side, alternated), and whether each run loaded the
embedding model.

Each run is a fresh process (`python -c` that runs the CLI and, at exit, says whether `wordllama`
was imported), so the cost of recall is what a person waits for: opening the memory store, the one
cheap "has memories?" lookup, and for the user with memories, loading the model, embedding the
query and the hybrid search.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench_profiles import _clean_env, discard_embedded_postgres

USER = "heavy"
TARGET_RATIO = 1.3
TARGET_TRAIL_RATIO = 1.1  # analyze with the ticker's decision trail against without it
# Runs the CLI in this interpreter, and reports at exit whether the embedding model's package loaded.
CHILD = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('\\nWORDLLAMA=%s\\n' % ('wordllama' in sys.modules)))\n"
    "from market_analyst.cli import main\n"
    "main(sys.argv[1:])\n"
)
TICKERS = ("NVDA", "MSFT", "AAPL", "AMZN", "GOOG", "META")
PHRASES = (
    "say more about the drawdown in {t}",
    "figures for {t} are stale, refresh before approving",
    "fine, but watch supplier concentration for {t}",
    "the {t} valuation looks stretched against its own history",
    "keep {t} under five percent of the portfolio",
    "what about foundry dependence and export limits for {t}",
    "the {t} report should compare against the index over three years",
    "approved; next time mention the volatility regime change in {t}",
)


def seed(data_dir: Path, count: int) -> float:
    """Write `count` memories for USER into the data directory's store, in batches; seconds taken."""
    from market_analyst.deps import open_memory
    from market_analyst.settings import Settings
    from market_analyst.state import Memory, memory_id

    os.environ["MA_DATA_DIR"] = str(data_dir)
    store = open_memory(Settings.load())
    start = datetime(2025, 1, 1, tzinfo=UTC)
    # One in four is what a thread's decision left (feedback, a rejection, an approval note), so the
    # ticker's decision trail has something to find: about 40 of 1,000 on NVDA.
    decided = ("feedback", "rejection", "approval_note")
    memories = [
        Memory(
            id=memory_id("remembered", USER, str(i)),
            owner=USER,
            kind=decided[i // 4 % 3] if i % 4 == 0 else "remembered",
            text=PHRASES[i % len(PHRASES)].format(t=TICKERS[i % len(TICKERS)]) + f" (note {i})",
            ticker=TICKERS[i % len(TICKERS)],
            created_at=start + timedelta(hours=i),
            thread_id=f"bench-thread-{i}" if i % 4 == 0 else None,
            draft_id=None,
            archive_key=None,
            said_by="rev.kim" if i % 4 == 0 else USER,
            verified=False,
        )
        for i in range(count)
    ]
    t0 = time.perf_counter()
    for at in range(0, count, 250):
        store.write(memories[at : at + 250])
    close = getattr(store, "close", None)
    if close is not None:
        close()
    del os.environ["MA_DATA_DIR"]
    return time.perf_counter() - t0


def run(count: int = 1000, runs: int = 5) -> bool:
    """Print the median start-to-gate time of each, their ratio, and whether the model was loaded."""
    with tempfile.TemporaryDirectory(prefix="bench-memory-analyze-") as tmp:
        dirs = {"with": Path(tmp) / "with", "none": Path(tmp) / "none"}
        for d in dirs.values():
            d.mkdir()
        seconds = seed(dirs["with"], count)
        print(f"  seeded {count:,} memories for {USER!r}: {seconds:.2f} s")
        envs = {k: _clean_env(MA_DATA_DIR=str(d)) for k, d in dirs.items()}
        loaded: dict[str, set[bool]] = {k: set() for k in dirs}

        def analyze(kind: str) -> float:
            t0 = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", CHILD, "analyze", "NVDA", "--user", USER,
                 "--question", "what did I say about suppliers?", "--json"],
                cwd=dirs[kind], env=envs[kind], capture_output=True, text=True, check=True,
            )  # fmt: skip
            elapsed = time.perf_counter() - t0
            loaded[kind].add("WORDLLAMA=True" in done.stderr)
            return elapsed

        try:
            for kind in dirs:
                analyze(kind)  # starts the embedded PostgreSQL; not timed
            times: dict[str, list[float]] = {k: [] for k in dirs}
            for _ in range(runs):
                for kind in dirs:  # alternated, so a busy moment of the machine hits both
                    times[kind].append(analyze(kind))
            trail_ms, trail_found = trail_cost(dirs["with"], runs=max(runs, 5) * 4)
        finally:
            for d in dirs.values():
                discard_embedded_postgres(d / "postgres")
    median = {k: statistics.median(t) for k, t in times.items()}
    ratio = median["with"] / median["none"]
    runs_of = "one run" if runs == 1 else f"median of {runs} runs"
    print(f"  {runs_of} of 'analyze NVDA' to the gate, the same user:")
    print(f"    with {count:,} memories  {median['with']:.2f} s   (model loaded: {loaded['with']})")
    print(f"    with none            {median['none']:.2f} s   (model loaded: {loaded['none']})")
    met_ratio = ratio <= TARGET_RATIO
    no_model = loaded["none"] == {False}
    print(f"  ratio {ratio:.2f}x (target <= {TARGET_RATIO}x): {'met' if met_ratio else 'MISSED'}")
    print(f"  a user with no memories loads no model: {'yes' if no_model else 'NO'}")
    # What the ticker's decision trail adds to the run with memories: its lookup, timed in this process
    # against a fresh store each time (as a command opens it), beside the recall it precedes.
    trail_ratio = median["with"] / (median["with"] - trail_ms / 1000)
    met_trail = trail_ratio <= TARGET_TRAIL_RATIO
    print(
        f"  the ticker's trail ({trail_found} found on NVDA, at most 3 shown): {trail_ms:.1f} ms a run, "
        f"analyze with it against without {trail_ratio:.3f}x (target <= {TARGET_TRAIL_RATIO}x): "
        f"{'met' if met_trail else 'MISSED'}"
    )
    return met_ratio and no_model and met_trail


def trail_cost(data_dir: Path, runs: int) -> tuple[float, int]:
    """The median time of the trail's lookup for USER on NVDA (ms), each on a freshly opened store, and
    how many trail memories there are."""
    from market_analyst.deps import open_memory
    from market_analyst.settings import Settings

    settings = Settings.load(environ={"MA_DATA_DIR": str(data_dir)}, dotenv=None)
    spent, found = [], 0
    for _ in range(runs):
        store = open_memory(settings)
        t0 = time.perf_counter()
        shown, more = store.trail(USER, "NVDA", limit=3)
        spent.append(time.perf_counter() - t0)
        found = len(shown) + more
        close = getattr(store, "close", None)
        if close is not None:
            close()
    return statistics.median(spent) * 1000, found
