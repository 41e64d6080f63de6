"""Getting into an embedded store that one process holds at a time: owner-only folders, a lock file,
and a bounded wait with backoff before saying the store is busy.

Both embedded engines refuse a second opener at once instead of queueing it (Qdrant Edge locks its
write-ahead log, `qdrant-client` local mode a `.lock` file), and each command holds a store only for
one short operation. So a command that finds the store held retries with growing, jittered pauses
for a few seconds, then gives up with one line.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_random_exponential,
)

from market_analyst.errors import UserError
from market_analyst.files import private_dir

T = TypeVar("T")

# How long a command waits for a store another process holds, and the longest pause between tries.
LOCK_WAIT_SECONDS = 5.0
MAX_PAUSE_SECONDS = 0.25


class StoreBusy(Exception):
    """Another process holds the store right now; trying again later may succeed."""


@contextmanager
def lock_file(path: Path, *, shared: bool = False, what: str = "the profile store") -> Iterator[None]:
    """Hold an advisory lock on `path` (created owner-only) for the block; `StoreBusy` at once when
    another process holds it in a conflicting mode. The kernel releases it if the process dies.
    `what` names the store in messages."""
    private_dir(path.parent, what)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:  # the data directory is a file, or this user cannot write it
        raise UserError(f"cannot create {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreBusy(str(path)) from None
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def wait_while_busy(
    attempt: Callable[[], T],
    *,
    location: str,
    seconds: float = LOCK_WAIT_SECONDS,
    what: str = "the profile store",
) -> T:
    """Call `attempt` until it stops raising `StoreBusy`, pausing with jittered exponential backoff,
    for at most about `seconds`; then a `UserError` of one line that names `what` and `location`."""
    retrying = Retrying(
        retry=retry_if_exception_type(StoreBusy),
        wait=wait_random_exponential(multiplier=0.02, max=MAX_PAUSE_SECONDS),
        stop=stop_after_delay(seconds),
        reraise=True,
    )
    try:
        return retrying(attempt)
    except StoreBusy:
        raise UserError(
            f"{what} {location} is in use by another process (an embedded store admits one "
            f"process at a time); waited {seconds:g} s: try again when it finishes, or set QDRANT_URL "
            "to use a Qdrant server"
        ) from None
