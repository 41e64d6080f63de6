"""Profile-store benches: Qdrant Edge (the default) side by side with `qdrant-client` local mode (the
earlier default, `MA_PROFILE_STORE=local`), each holding the same N profiles written through the
application's own store.

- `lookups`: reads by exact user ID inside one open store, against a `scroll` over an exact
  `user_id` filter (Edge answers it from its keyword index; local mode scans every point).
- `fresh_open`: what every command pays, in a new process: import the engine, open the store, read
  one profile.
- `analyze_start`: `market-analyst analyze` from process start to the approval gate, with the store
  in its data directory (an embedded PostgreSQL there, started before the timed runs).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from market_analyst.persistence.postgres.embedded import discard_embedded_postgres
from market_analyst.persistence.profiles.store import ProfileStore
from market_analyst.state import HORIZONS, RISK_TOLERANCES, Profile

ENGINES = {"edge": "Qdrant Edge", "local": "local mode"}
_SEEDED: dict[int, tuple[tempfile.TemporaryDirectory[str], dict[str, Path]]] = {}


def user(i: int) -> str:
    return f"user-{i:06d}@example.com"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def _scratch_dir() -> tempfile.TemporaryDirectory[str]:
    # Local mode commits every upserted point to SQLite on its own, which is disk-bound; a memory-backed
    # directory makes seeding 100,000 profiles take seconds instead of minutes. Both engines get the
    # same kind of directory, so the comparison stays fair.
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.TemporaryDirectory(prefix="bench-profiles-", dir=base)


def seeded_data_dirs(n: int) -> dict[str, Path]:
    """A data directory per engine whose profile store holds the same `n` profiles; made once per
    size and process, and removed when the process ends."""
    if n not in _SEEDED:
        tmp = _scratch_dir()
        dirs = {engine: Path(tmp.name) / engine for engine in ENGINES}
        for engine, data_dir in dirs.items():
            started = time.perf_counter()
            store = ProfileStore(path=data_dir / "profiles", engine=engine)  # type: ignore[arg-type]
            with store.session() as session:
                session.save_many(
                    Profile(
                        user_id=user(i),
                        risk_tolerance=RISK_TOLERANCES[i % 3],  # type: ignore[arg-type]
                        horizon=HORIZONS[i % 3],  # type: ignore[arg-type]
                        preferred_sectors=["semiconductors", "software"][: i % 3],
                        notes=f"profile {i}",
                    )
                    for i in range(n)
                )
            print(f"  seeded {n:,} profiles, {ENGINES[engine]}: {time.perf_counter() - started:.1f} s")
        _SEEDED[n] = (tmp, dirs)
    return _SEEDED[n][1]


def _median_of(runs: int, measure: Callable[[], dict[str, float]]) -> dict[str, float]:
    results = [measure() for _ in range(runs)]
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def _side_by_side(rows: list[tuple[str, dict[str, str]]]) -> None:
    print(f"  {'':<28}{ENGINES['edge']:>14}{ENGINES['local']:>14}")
    for label, cells in rows:
        print(f"  {label:<28}{cells['edge']:>14}{cells['local']:>14}")


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without the application's settings (an embedded store, no servers)."""
    prefixes = ("MA_", "POSTGRES_URL", "REDIS_URL", "QDRANT_", "SOURCE_DATE_EPOCH", "OPENAI_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)} | extra


def lookups(n: int) -> bool:
    """Lookups by user ID on Edge (target: under 1 ms), and exact-filter scrolls on both engines."""
    dirs = seeded_data_dirs(n)
    rng = random.Random(20250214)
    chosen = [user(rng.randrange(n)) for _ in range(2_000)]
    store = ProfileStore(path=dirs["edge"] / "profiles")
    with store.session() as session:
        for name in chosen[:50]:  # warm-up
            session.get(name)
        times = []
        for name in chosen:
            t0 = time.perf_counter()
            profile = session.get(name)
            times.append(time.perf_counter() - t0)
            assert profile is not None and profile.user_id == name
        assert session.get("nobody@example.com") is None
    scroll_edge = _edge_scrolls(dirs["edge"] / "profiles", chosen[:200])
    scroll_local = _local_mode_scrolls(dirs["local"] / "profiles", chosen[:5])
    mean = statistics.fmean(times)
    p99 = sorted(times)[int(len(times) * 0.99) - 1]
    print(
        f"  lookup by user ID on Qdrant Edge (retrieve + exact payload check), {len(times):,} reads: "
        f"mean {ms(mean)}, median {ms(statistics.median(times))}, p99 {ms(p99)}"
    )
    edge_mean, local_mean = statistics.fmean(scroll_edge), statistics.fmean(scroll_local)
    print(f"  scroll with an exact user_id filter, Qdrant Edge (keyword index): mean {ms(edge_mean)}")
    print(f"  scroll with an exact user_id filter, local mode (scans every point): mean {ms(local_mean)}")
    met = mean < 0.001
    print(f"  target under 1 ms a lookup: {'met' if met else 'MISSED'}")
    return met


def _edge_scrolls(path: Path, names: list[str]) -> list[float]:
    from qdrant_edge import FieldCondition, Filter, MatchValue, ScrollRequest

    from market_analyst.persistence.profiles.edge import load_shard

    shard = load_shard(path)
    try:
        times = []
        for name in names:
            request = ScrollRequest(
                filter=Filter(must=[FieldCondition("user_id", match=MatchValue(name))]), limit=1
            )
            t0 = time.perf_counter()
            records, _ = shard.scroll(request)
            times.append(time.perf_counter() - t0)
            assert records and records[0].payload["user_id"] == name
        return times
    finally:
        shard.close()


def _local_mode_scrolls(path: Path, names: list[str]) -> list[float]:
    import warnings

    from qdrant_client import QdrantClient, models

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # local mode's "more than 20,000 points" notice
        client = QdrantClient(path=str(path))
    try:
        times = []
        for name in names:
            condition = models.FieldCondition(key="user_id", match=models.MatchValue(value=name))
            t0 = time.perf_counter()
            records, _ = client.scroll("profiles", scroll_filter=models.Filter(must=[condition]), limit=1)
            times.append(time.perf_counter() - t0)
            assert records and records[0].payload and records[0].payload["user_id"] == name
        return times
    finally:
        client.close()


_FRESH_OPEN = """
import json, sys, time
from pathlib import Path
started = time.perf_counter()
from market_analyst.persistence.profiles.store import ProfileStore
store = ProfileStore(path=Path(sys.argv[1]), engine=sys.argv[2])
t0 = time.perf_counter()
__import__("qdrant_edge" if sys.argv[2] == "edge" else "qdrant_client")
t1 = time.perf_counter()
profile = store.get(sys.argv[3])
t2 = time.perf_counter()
assert profile is not None and profile.user_id == sys.argv[3]
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so it would report the parent's size.
status = Path("/proc/self/status").read_text() if Path("/proc/self/status").exists() else ""
peak = next((int(l.split()[1]) / 1024 for l in status.splitlines() if l.startswith("VmHWM:")), float("nan"))
print(json.dumps({"import": t1 - t0, "open_read": t2 - t1, "peak_mb": peak}))
"""


def fresh_open(n: int, runs: int = 5) -> bool:
    """A new process per run: import the engine, open the store, read one profile; median of runs."""
    dirs = seeded_data_dirs(n)
    medians: dict[str, dict[str, float]] = {}
    for engine in ENGINES:
        target = user(n // 2)

        def one_run(engine: str = engine, target: str = target) -> dict[str, float]:
            t0 = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", _FRESH_OPEN, str(dirs[engine] / "profiles"), engine, target],
                capture_output=True,
                text=True,
                check=True,
                env=_clean_env(),
            ).stdout
            return {**json.loads(out), "process": time.perf_counter() - t0}

        medians[engine] = _median_of(runs, one_run)
    runs_of = "one fresh process" if runs == 1 else f"median of {runs} fresh processes"
    print(f"  {runs_of}, {n:,} profiles:")
    _side_by_side(
        [
            ("import the engine", {e: f"{m['import']:.3f} s" for e, m in medians.items()}),
            ("open + read one profile", {e: f"{m['open_read']:.3f} s" for e, m in medians.items()}),
            ("whole process", {e: f"{m['process']:.2f} s" for e, m in medians.items()}),
            ("peak memory", {e: f"{m['peak_mb']:.0f} MB" for e, m in medians.items()}),
        ]
    )
    ratio = medians["local"]["open_read"] / medians["edge"]["open_read"]
    print(f"  open + read: Qdrant Edge is {ratio:,.1f}x faster")
    return True


def analyze_start(n: int, runs: int = 3) -> bool:
    """`market-analyst analyze NVDA` wall time, start to gate, with each engine's store of n profiles."""
    dirs = seeded_data_dirs(n)
    command = Path(sys.executable).parent / "market-analyst"
    envs = {e: _clean_env(MA_DATA_DIR=str(d), MA_PROFILE_STORE=e) for e, d in dirs.items()}

    def analyze(engine: str) -> float:
        t0 = time.perf_counter()
        subprocess.run(
            [str(command), "analyze", "NVDA", "--user", user(n // 3), "--json"],
            cwd=dirs[engine],
            env=envs[engine],
            capture_output=True,
            check=True,
        )
        return time.perf_counter() - t0

    try:
        for engine in ENGINES:
            analyze(engine)  # starts the embedded PostgreSQL; not timed
        times: dict[str, list[float]] = {e: [] for e in ENGINES}
        for _ in range(runs):
            for engine in ENGINES:  # alternated, so a busy moment of the machine hits both
                times[engine].append(analyze(engine))
    finally:
        for engine in ENGINES:  # the embedded servers and their files (elsewhere as root) go too
            discard_embedded_postgres(dirs[engine] / "postgres")
    median = {e: statistics.median(t) for e, t in times.items()}
    runs_of = "one run" if runs == 1 else f"median of {runs} runs"
    print(f"  {runs_of} of 'analyze NVDA' (the run stops at the gate), {n:,} profiles:")
    _side_by_side([("process start to gate", {e: f"{m:.2f} s" for e, m in median.items()})])
    print(f"  Qdrant Edge saves {median['local'] - median['edge']:.2f} s a run")
    return True
