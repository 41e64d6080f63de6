"""Benchmarks, in independent sections: `python scripts/bench.py [SECTION ...] [--n N] [--check]`.

Each section builds its own data in a temporary directory, prints its own lines (the numbers, and
whether its targets were met) and returns whether they were. With no SECTION every section runs.
`--n` overrides each section's data size for a quick run; `--check` exits 1 when a target is missed
(timings depend on the machine, so the default is to report, not to judge).

To add a section: write `def bench_NAME(n: int | None) -> bool`, then add it to `SECTIONS`.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from market_analyst.persistence.profiles import COLLECTION, ProfileStore
from market_analyst.state import HORIZONS, RISK_TOLERANCES, Profile

Section = Callable[[int | None], bool]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def _scratch_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    # Local mode commits every upserted point to SQLite on its own, which is disk-bound; a memory-backed
    # directory makes seeding 100,000 profiles take a minute instead of several. The lookups measured
    # below never touch the disk: local mode serves reads from memory.
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.TemporaryDirectory(prefix=prefix, dir=base)


def bench_profiles(n: int | None) -> bool:
    """Profile lookup by exact user ID (point ID + payload check) against a `scroll` over an exact
    `user_id` filter (the approach of the project this one is based on), in Qdrant local mode."""
    from qdrant_client import QdrantClient, models

    n = n or 100_000
    lookups, scrolls = 2_000, 5
    rng = random.Random(20250214)
    users = [f"user-{i:06d}@example.com" for i in range(n)]
    print(f"profiles: {n:,} stored profiles, Qdrant local mode")
    with _scratch_dir("bench-profiles-") as tmp:
        store = ProfileStore(path=Path(tmp) / "profiles")
        print(f"  store: {store.path}")

        started = time.perf_counter()
        with store.session() as session:
            session.save_many(
                Profile(
                    user_id=u,
                    risk_tolerance=RISK_TOLERANCES[i % 3],  # type: ignore[arg-type]
                    horizon=HORIZONS[i % 3],  # type: ignore[arg-type]
                    preferred_sectors=["semiconductors", "software"][: i % 3],
                    notes=f"profile {i}",
                )
                for i, u in enumerate(users)
            )
        seeded = time.perf_counter() - started
        print(f"  seed: {seeded:.1f} s ({_ms(seeded / n)} a profile, batches of 1,000)")

        # What every command pays in local mode: the client loads the whole collection when it opens.
        started = time.perf_counter()
        with store.session() as session:
            opened = time.perf_counter() - started
            chosen = [rng.choice(users) for _ in range(lookups)]
            for user in chosen[:50]:  # warm-up
                session.get(user)
            times = []
            for user in chosen:
                t0 = time.perf_counter()
                profile = session.get(user)
                times.append(time.perf_counter() - t0)
                assert profile is not None and profile.user_id == user
            assert session.get("nobody@example.com") is None
        print(f"  open the store: {opened:.2f} s (loads every point; paid once per command in local mode)")

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # local mode's "more than 20,000 points" notice
            client = QdrantClient(path=str(store.path))
        try:
            scroll_times = []
            for user in chosen[:scrolls]:
                t0 = time.perf_counter()
                records, _ = client.scroll(
                    COLLECTION,
                    scroll_filter=models.Filter(
                        must=[models.FieldCondition(key="user_id", match=models.MatchValue(value=user))]
                    ),
                    limit=1,
                    with_payload=True,
                )
                profile = Profile.model_validate(records[0].payload)
                scroll_times.append(time.perf_counter() - t0)
                assert profile.user_id == user
        finally:
            client.close()

    lookup_mean = statistics.fmean(times)
    lookup_median = statistics.median(times)
    lookup_p99 = sorted(times)[int(len(times) * 0.99) - 1]
    scroll_mean = statistics.fmean(scroll_times)
    ratio = scroll_mean / lookup_mean
    print(
        f"  lookup by user ID (retrieve + exact payload check), {lookups:,} reads: mean {_ms(lookup_mean)}, "
        f"median {_ms(lookup_median)}, p99 {_ms(lookup_p99)}"
    )
    print(f"  scroll with an exact user_id filter, {scrolls} reads: mean {_ms(scroll_mean)}")
    print(f"  ratio: lookup is {ratio:,.0f}x faster")
    met_ratio, met_latency = ratio >= 100, lookup_mean < 0.001
    print(f"  target at least 100x faster: {'met' if met_ratio else 'MISSED'}")
    print(f"  target under 1 ms a lookup: {'met' if met_latency else 'MISSED'}")
    return met_ratio and met_latency


def bench_archive(n: int | None) -> bool:
    """`reports list` and `reports search` over archived reports (10,000 by default), against a
    reader that parses every file; no target is set, the ratio is reported."""
    import bench_archive

    bench_archive.run(n or 10_000)
    return True


def bench_approvals(n: int | None) -> bool:
    """An approval through a warm `market-analyst serve` against `market-analyst approve` in a process
    of its own (100 of each by default); no target is set, both are reported."""
    import bench_approvals

    bench_approvals.run(n or 100)
    return True


SECTIONS: dict[str, Section] = {
    "profiles": bench_profiles,
    "archive": bench_archive,
    "approvals": bench_approvals,
}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections (all by default) and report which missed their targets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "sections",
        nargs="*",
        metavar="SECTION",
        help=f"sections to run: {', '.join(SECTIONS)} (default: all)",
    )
    parser.add_argument("--n", type=int, default=None, help="data size for each section (default: its own)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a section misses a target")
    args = parser.parse_args(argv)
    if args.n is not None and args.n < 1:
        parser.error("--n must be at least 1")
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {unknown[0]!r}: choose from {', '.join(SECTIONS)}")
    missed = []
    for name in args.sections or list(SECTIONS):
        if not SECTIONS[name](args.n):
            missed.append(name)
        print()
    print(f"targets missed in: {', '.join(missed)}" if missed else "all targets met")
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
