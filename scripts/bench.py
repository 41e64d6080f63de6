"""Benchmarks, in independent sections: `python scripts/bench.py [SECTION ...] [--n N | --small] [--check]`.

Each section builds its own data in a temporary directory (the profile sections share one pair of
seeded stores per size), prints its own lines (the numbers, and whether its targets were met) and
returns whether they were. With no SECTION every section runs.
`--n` overrides each section's data size for a quick run. `--small` runs each section at its own
small size (`SMALL`) and times one fresh process of each kind where a section would time several:
a check, in a few minutes, that every section still runs (the test suite's), not a measurement.
`--check` exits 1 when a target is missed (timings depend on the machine, so the default is to
report, not to judge).

To add a section: write `def bench_NAME(scale: Scale) -> bool`, then add it to `SECTIONS` and its
small size to `SMALL`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import bench_profiles as bench_profiles_module


@dataclass(frozen=True)
class Scale:
    """How big a section's run is: `n`, its data size, and `runs`, how many fresh processes it times
    of each kind; None is the section's own default."""

    n: int | None = None
    runs: int | None = None


Section = Callable[[Scale], bool]


def bench_profiles(scale: Scale) -> bool:
    """Profile lookups by exact user ID on Qdrant Edge, and exact-filter scrolls on both engines."""
    n = scale.n or 100_000
    print(f"profiles: {n:,} stored profiles, Qdrant Edge and qdrant-client local mode")
    return bench_profiles_module.lookups(n)


def bench_profile_open(scale: Scale) -> bool:
    """A fresh process opens the store and reads one profile: Qdrant Edge against local mode."""
    n = scale.n or 100_000
    print(f"profile-open: a fresh process opens the profile store and reads one profile ({n:,} profiles)")
    return bench_profiles_module.fresh_open(n, runs=scale.runs or 5)


def bench_analyze_start(scale: Scale) -> bool:
    """`analyze` from process start to the approval gate, with the store of each engine."""
    n = scale.n or 100_000
    print(f"analyze-start: 'analyze' from process start to the gate, {n:,} stored profiles")
    return bench_profiles_module.analyze_start(n, runs=scale.runs or 3)


def bench_archive(scale: Scale) -> bool:
    """`reports list` and `reports search` over archived reports (10,000 by default), against a
    reader that parses every file; no target is set, the ratio is reported."""
    import bench_archive

    bench_archive.run(scale.n or 10_000)
    return True


def bench_archive_postgres(scale: Scale) -> bool:
    """`reports list` and `reports search` over 100,000 reports by default, in the directory archive
    and in PostgreSQL (`MA_RECORDS=postgres`), p50 side by side; no target is set, the ratio is
    reported."""
    import bench_archive

    bench_archive.run_postgres(scale.n or 100_000)
    return True


def bench_approvals(scale: Scale) -> bool:
    """An approval through a warm `market-analyst serve` against `market-analyst approve` in a process
    of its own (100 of each by default; targets: p50 under 50 ms and at least 25x); then `approve
    --note` for a user with 1,000 memories against one without (target within 1.2x), with a held
    memory store, and `remember` (20 of each by default)."""
    import bench_approvals

    warm = bench_approvals.run(scale.n or 100)
    notes = bench_approvals.run_notes(scale.n or 20)
    return warm and notes


def bench_threads(scale: Scale) -> bool:
    """`threads --pending` over 10,000 threads by default, on PostgreSQL and Redis, through the thread
    index against loading every thread's state; no target is set, the ratio is reported."""
    import bench_threads

    bench_threads.run(scale.n or 10_000)
    return True


def bench_memory(scale: Scale) -> bool:
    """Recall latency at 1,000 / 10,000 / 100,000 memories on Qdrant Edge (target: p50 under 20 ms
    at 100,000), write cost, bytes on disk, and a fresh process recalling with and without memories."""
    import bench_memory

    n = scale.n
    sizes = [n] if n else [1_000, 10_000, 100_000]
    print(f"memory: recall over {', '.join(f'{size:,}' for size in sizes)} memories on Qdrant Edge")
    met = bench_memory.recall(sizes)
    bench_memory.writes(min(n or 1_000, 1_000))
    bench_memory.fresh(min(n or 1_000, 1_000), runs=scale.runs or (5 if n is None else 2))
    return met


def bench_replicas(scale: Scale) -> bool:
    """Approvals (64 of each by default) through two `serve` replicas on one PostgreSQL records
    database and checkpointer, against one replica; no target is set, both are reported."""
    import bench_replicas

    bench_replicas.run(scale.n or 64)
    return True


def bench_memory_analyze(scale: Scale) -> bool:
    """`analyze` to the gate for a user with 1,000 memories against the same user with none (target
    within 1.3x), and that a user with none loads no embedding model."""
    import bench_memory_analyze

    n = scale.n or 1_000
    print(f"memory-analyze: 'analyze' from process start to the gate, a user with {n:,} memories and none")
    return bench_memory_analyze.run(n, runs=scale.runs or 5)


def bench_notifications(scale: Scale) -> bool:
    """Events a second from the outbox to a local receiver, with one worker and two (1,000 events by
    default), and an approval through a warm server with events written against without (20 of
    each; target within 1.1x)."""
    import bench_notifications

    return bench_notifications.run(
        scale.n or 1_000, approvals=20 if scale.n is None else max(3, scale.n // 10)
    )


def bench_encryption(scale: Scale) -> bool:
    """`analyze` to the gate and `approve`, fresh processes, with checkpoints sealed against without
    (target within 1.15x each)."""
    import bench_encryption

    return bench_encryption.run(scale.n or 15)


SECTIONS: dict[str, Section] = {
    "profiles": bench_profiles,
    "profile-open": bench_profile_open,
    "analyze-start": bench_analyze_start,
    "archive": bench_archive,
    "archive-postgres": bench_archive_postgres,
    "threads": bench_threads,
    "approvals": bench_approvals,
    "memory": bench_memory,
    "replicas": bench_replicas,
    "memory-analyze": bench_memory_analyze,
    "encryption": bench_encryption,
    "notifications": bench_notifications,
}

# Each section's size under --small: enough data for every line it prints, little enough that all
# of them run in a few minutes.
SMALL: dict[str, int] = {
    "profiles": 300,
    "profile-open": 300,
    "analyze-start": 300,
    "archive": 300,
    "archive-postgres": 300,
    "threads": 100,
    "approvals": 1,
    "memory": 300,
    "replicas": 4,
    "memory-analyze": 20,
    "encryption": 1,
    "notifications": 30,
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
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--n", type=int, default=None, help="data size for each section (default: its own)")
    size.add_argument(
        "--small",
        action="store_true",
        help="each section at its own small size, one timed process of each kind: a check that it runs",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a section misses a target")
    args = parser.parse_args(argv)
    if args.n is not None and args.n < 1:
        parser.error("--n must be at least 1")
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {unknown[0]!r}: choose from {', '.join(SECTIONS)}")
    missed = []
    for name in args.sections or list(SECTIONS):
        scale = Scale(SMALL[name], runs=1) if args.small else Scale(args.n)
        if not SECTIONS[name](scale):
            missed.append(name)
        print()
    print(f"targets missed in: {', '.join(missed)}" if missed else "all targets met")
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
