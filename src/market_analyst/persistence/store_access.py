"""Getting into an embedded store that one process holds at a time: owner-only folders, a lock file,
and a bounded wait with backoff before saying the store is busy.

Both embedded engines refuse a second opener at once instead of queueing it (Qdrant Edge locks its
write-ahead log, `qdrant-client` local mode a `.lock` file), and each command holds a store only for
one short operation. So a command that finds the store held retries with growing, jittered pauses
for a few seconds, then gives up with one line.
"""

from __future__ import annotations

import contextlib
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

T = TypeVar("T")

# How long a command waits for a store another process holds, and the longest pause between tries.
LOCK_WAIT_SECONDS = 5.0
MAX_PAUSE_SECONDS = 0.25


class StoreBusy(Exception):
    """Another process holds the store right now; trying again later may succeed."""


def private_dir(path: Path) -> Path:
    """`path` as a directory, creating it and any missing parents owner-only (0700 whatever the
    umask). Existing directories keep their mode: the embedded PostgreSQL, for one, may need others
    to traverse the data directory. A path that cannot be a directory is one `UserError` line."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            if directory.is_dir():
                continue  # another process made it first
            raise UserError(f"cannot create {directory}: a file is in the way") from None
        except OSError as exc:  # under a file, or in a directory this user cannot write
            raise UserError(f"cannot create {directory}: {exc.strerror or exc}") from None
        os.chmod(directory, 0o700)  # mkdir's mode is filtered by the umask
    return path


def private_tree(root: Path) -> None:
    """Make everything below `root` owner-only (0700 directories, 0600 files): the engines create
    their files with the umask's modes. Entries that vanish meanwhile (another process compacting
    the store) are skipped."""
    for directory, subdirs, files in os.walk(root):
        for name, mode in [(d, 0o700) for d in subdirs] + [(f, 0o600) for f in files]:
            path = os.path.join(directory, name)
            with contextlib.suppress(FileNotFoundError):
                if not os.path.islink(path):
                    os.chmod(path, mode)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in directory `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def lock_file(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an advisory lock on `path` (created owner-only) for the block; `StoreBusy` at once when
    another process holds it in a conflicting mode. The kernel releases it if the process dies."""
    private_dir(path.parent)
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


def wait_while_busy(attempt: Callable[[], T], *, location: str, seconds: float = LOCK_WAIT_SECONDS) -> T:
    """Call `attempt` until it stops raising `StoreBusy`, pausing with jittered exponential backoff,
    for at most about `seconds`; then a `UserError` of one line that names `location`."""
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
            f"the profile store {location} is in use by another process (an embedded store admits one "
            f"process at a time); waited {seconds:g} s: try again when it finishes, or set QDRANT_URL "
            "to use a Qdrant server"
        ) from None
