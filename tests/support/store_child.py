"""Runs the real CLI in a process of its own, killed at a chosen call.

    python -m tests.support.store_child [--kill WHEN:MODULE:ATTR[:N]] -- ARGS...

`--kill before|after:MODULE:ATTR[:N]`: SIGKILL this process just before, or just after, the N-th call
(default the first) of MODULE's ATTR (`crash_child.arm_call`). Only this child is patched; the
store, the files and the kill are real. (Commands started together, at one moment, are forked by
the harness: `Harness.run_together(at_once=True)`.)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support import REPO
from tests.support.crash_child import arm_call


def start(
    args: Sequence[str], *, env: dict[str, str], cwd: Path, kill: str | None = None
) -> subprocess.Popen[str]:
    """Start a child running `market-analyst ARGS`."""
    options = ["--kill", kill] if kill else []
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_child", *options, "--", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, args = argv[:split], argv[split + 1 :]
    named = dict(zip(options[::2], options[1::2], strict=True))
    if "--kill" in named:
        arm_call(named["--kill"])
    from market_analyst.cli import main as cli_main

    cli_main(args)


if __name__ == "__main__":
    main(sys.argv[1:])
