"""Holds a thread's lease in a process of its own until killed, as a long command would.

    python -m tests.support.lease_holder THREAD_ID

Prints "held" once the lease is taken. Reads its settings from the environment, like the CLI."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.support import REPO


def hold_lease(thread_id: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start a holder for `thread_id` and return once it holds the lease (kill it to release)."""
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.support.lease_holder", thread_id],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    line = holder.stdout.readline().strip()
    if line != "held":
        holder.kill()
        problem = holder.stderr.read() if holder.stderr else ""
        raise AssertionError(f"the lease holder did not take the lease: {line!r} {problem}")
    return holder


if __name__ == "__main__":
    from market_analyst.deps import open_checkpointer
    from market_analyst.settings import Settings

    with open_checkpointer(Settings.load(dotenv=None)) as backend, backend.lease(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
