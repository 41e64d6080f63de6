"""Holds a thread's lease in a process of its own until killed, as a long command would."""

from __future__ import annotations

import os
import time

from tests.support.crashkit import Harness, Held, say


def hold_lease(harness: Harness, thread_id: str, env: dict[str, str]) -> Held:
    """Start a holder for `thread_id` with the settings in `env` (forked by the harness from its
    pre-imported server) and return once it holds the lease (kill it to release)."""
    return harness.hold(_hold, (thread_id, env), until="held")


def _hold(thread_id: str, env: dict[str, str], said: str) -> None:
    os.environ.clear()
    os.environ.update(env)  # its settings come from the environment, like the CLI's
    from market_analyst.deps import open_checkpointer
    from market_analyst.settings import Settings

    with open_checkpointer(Settings.load(dotenv=None)) as backend, backend.lease(thread_id):
        say(said, "held")
        time.sleep(600)
