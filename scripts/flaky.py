"""The flake census: run the suite (or some tiers) several times in a row, each in a new random order,
and print what failed where.

    python scripts/flaky.py [--runs 3] [--workers 2] [PATH ...]     (make flaky FLAKY_ARGS=...)

Each run is the README's test command with `--random-order-bucket=global` and a seed of its own
(printed, so a failure can be replayed with `--random-order-seed=SEED`). The table lists every test
that failed in any run: how many runs it was in, how many it failed, and the first line of each
failure. Exit 1 if any test failed, 0 if none did. No test is ever re-run here to hide a failure:
the runs are independent, and every failure of every run is counted.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALL_TIERS = ["tests/system", "tests/journeys", "tests/conformance", "tests/unit"]


@dataclass
class Census:
    runs: dict[str, int] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)

    def add(self, junit: Path, run: int) -> tuple[int, int]:
        """Count one run's JUnit report; (tests, failed) of that run."""
        tests = failed = 0
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            problems = [child for child in case if child.tag in ("failure", "error")]
            skipped = any(child.tag == "skipped" for child in case)
            if skipped and not problems:
                continue
            tests += 1
            self.runs[name] = self.runs.get(name, 0) + 1
            for problem in problems:
                failed += 1
                text = (problem.get("message") or problem.text or "").strip().splitlines()
                first = text[0][:160] if text else problem.tag
                self.failures.setdefault(name, []).append(f"run {run}: {first}")
        return tests, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", default=os.environ.get("PYTEST_WORKERS", "2"))
    parser.add_argument("--seed", type=int, help="the first run's seed (the next ones add 1)")
    parser.add_argument("paths", nargs="*", default=ALL_TIERS)
    args, extra = parser.parse_known_args()

    (REPO / ".cache").mkdir(exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix="flaky-", dir=REPO / ".cache"))  # a census of its own
    census = Census()
    first_seed = args.seed if args.seed is not None else random.randrange(1, 1_000_000)
    summary = []
    for run in range(1, args.runs + 1):
        seed = first_seed + run - 1
        junit = out / f"run-{run}.xml"
        junit.unlink(missing_ok=True)
        command = [
            str(REPO / ".venv" / "bin" / "pytest"),
            *("-n", str(args.workers), "--dist", "loadgroup", "-q", "-p", "no:cacheprovider"),
            *("--random-order-bucket=global", f"--random-order-seed={seed}", f"--junitxml={junit}"),
            *args.paths,
            *extra,
        ]
        print(f"run {run}/{args.runs}, seed {seed}: {' '.join(command[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.call(command, cwd=REPO, stdout=sys.stdout, stderr=sys.stderr)
        wall = time.monotonic() - started
        if not junit.exists():
            print(f"run {run}: pytest exited {code} and wrote no report", file=sys.stderr)
            return 2
        tests, failed = census.add(junit, run)
        summary.append(
            f"run {run}: seed {seed}, {tests} tests, {failed} failed, exit {code}, {wall:.0f} s wall"
        )

    print("\nflake census")
    for line in summary:
        print("  " + line)
    if not census.failures:
        print(f"  0 failures: {len(census.runs)} tests, each in {args.runs} runs")
        shutil.rmtree(out, ignore_errors=True)
        return 0
    width = max(len(name) for name in census.failures)
    print(f"\n  {'test'.ljust(width)}  runs  failures")
    for name in sorted(census.failures):
        print(f"  {name.ljust(width)}  {census.runs.get(name, 0):>4}  {len(census.failures[name]):>8}")
        for line in census.failures[name]:
            print(f"  {'':{width}}    {line}")
    print(f"\n  {sum(len(v) for v in census.failures.values())} failures in {len(census.failures)} tests")
    print(f"  the runs' JUnit reports: {out}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
