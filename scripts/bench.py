"""Benchmarks, in independent sections: `python scripts/bench.py [SECTION ...] [--n N] [--check]`.

Each section builds its own data in a temporary directory (the profile sections share one pair of
seeded stores per size), prints its own lines (the numbers, and whether its targets were met) and
returns whether they were. With no SECTION every section runs.
`--n` overrides each section's data size for a quick run; `--check` exits 1 when a target is missed
(timings depend on the machine, so the default is to report, not to judge).

To add a section: write `def bench_NAME(n: int | None) -> bool`, then add it to `SECTIONS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import bench_profiles as bench_profiles_module

Section = Callable[[int | None], bool]


def bench_profiles(n: int | None) -> bool:
    """Profile lookups by exact user ID on Qdrant Edge, and exact-filter scrolls on both engines."""
    n = n or 100_000
    print(f"profiles: {n:,} stored profiles, Qdrant Edge and qdrant-client local mode")
    return bench_profiles_module.lookups(n)


def bench_profile_open(n: int | None) -> bool:
    """A fresh process opens the store and reads one profile: Qdrant Edge against local mode."""
    n = n or 100_000
    print(f"profile-open: a fresh process opens the profile store and reads one profile ({n:,} profiles)")
    return bench_profiles_module.fresh_open(n)


def bench_analyze_start(n: int | None) -> bool:
    """`analyze` from process start to the approval gate, with the store of each engine."""
    n = n or 100_000
    print(f"analyze-start: 'analyze' from process start to the gate, {n:,} stored profiles")
    return bench_profiles_module.analyze_start(n)


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


def bench_threads(n: int | None) -> bool:
    """`threads --pending` over 10,000 threads by default, on PostgreSQL and Redis, through the thread
    index against loading every thread's state; no target is set, the ratio is reported."""
    import bench_threads

    bench_threads.run(n or 10_000)
    return True


def bench_memory(n: int | None) -> bool:
    """Recall latency at 1,000 / 10,000 / 100,000 memories on Qdrant Edge (target: p50 under 20 ms
    at 100,000), write cost, bytes on disk, and a fresh process recalling with and without memories."""
    import bench_memory

    sizes = [n] if n else [1_000, 10_000, 100_000]
    print(f"memory: recall over {', '.join(f'{size:,}' for size in sizes)} memories on Qdrant Edge")
    met = bench_memory.recall(sizes)
    bench_memory.writes(min(n or 1_000, 1_000))
    bench_memory.fresh(min(n or 1_000, 1_000))
    return met


SECTIONS: dict[str, Section] = {
    "profiles": bench_profiles,
    "profile-open": bench_profile_open,
    "analyze-start": bench_analyze_start,
    "archive": bench_archive,
    "threads": bench_threads,
    "approvals": bench_approvals,
    "memory": bench_memory,
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
