"""Runs the real CLI in a process of its own, optionally started at a signal or killed at a chosen call.

    python -m tests.support.store_child [--go FILE] [--kill WHEN:MODULE:ATTR[:N]] -- ARGS...

`--go FILE`: import everything a command needs, print "ready", and start only once FILE exists, so
several children reach their stores at the same moment instead of one import apart.
`--kill before|after:MODULE:ATTR[:N]`: SIGKILL this process just before, or just after, the N-th call
(default the first) of MODULE's ATTR (`crash_child.arm_call`). Only this child is patched; the
store, the files and the kill are real.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support import REPO
from tests.support.crash_child import arm_call

# What commands import on their way to a store; loaded before "ready" (not qdrant_client: commands
# on Qdrant Edge never import it, and the migration that does is what some children are killed in).
PRELOAD = (
    "market_analyst.cli",
    "market_analyst.workflow.runs",
    "market_analyst.graph",
    "qdrant_edge",
    "psycopg",
)


def start(
    args: Sequence[str], *, env: dict[str, str], cwd: Path, go: Path | None = None, kill: str | None = None
) -> subprocess.Popen[str]:
    """Start a child running `market-analyst ARGS`; with `go`, return once it is ready to start."""
    options = [*(["--go", str(go)] if go else []), *(["--kill", kill] if kill else [])]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_child", *options, "--", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if go is not None:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == "ready", (
            f"child did not get ready: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        )
    return proc


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, args = argv[:split], argv[split + 1 :]
    named = dict(zip(options[::2], options[1::2], strict=True))
    if "--kill" in named:
        arm_call(named["--kill"])
    if "--go" in named:
        for module in PRELOAD:
            importlib.import_module(module)
        print("ready", flush=True)
        while not Path(named["--go"]).exists():
            time.sleep(0.005)
    from market_analyst.cli import main as cli_main

    cli_main(args)


if __name__ == "__main__":
    main(sys.argv[1:])
