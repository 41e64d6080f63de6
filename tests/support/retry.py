"""Retry a command while a killed command's Redis lease lives out its TTL."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar


class Finished(Protocol):
    returncode: int
    stderr: str


R = TypeVar("R", bound=Finished)


def retry_while_busy(run: Callable[[], R], wait: float = 30.0, pause: float = 0.2) -> R:
    """Run `run()` again while it fails with "is busy", for up to `wait` seconds; return the last
    outcome (any other failure is returned at once, for the caller to judge)."""
    deadline = time.monotonic() + wait
    outcome = run()
    while outcome.returncode != 0 and "is busy" in outcome.stderr and time.monotonic() < deadline:
        time.sleep(pause)
        outcome = run()
    return outcome
