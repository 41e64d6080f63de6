"""Where a test run keeps its scratch files: in memory (a tmpfs) when the machine has room for it.

Every file a test writes goes under `TMPDIR`: each `tmp_path`, the session's PostgreSQL and Redis
data, every data directory the CLI's children use, and what `make bench`, `make demo` and nested
sessions write. On the root disk (ext4, mounted with `discard`) most of that time was the kernel's:
new inodes among thousands just deleted, journal commits and fsyncs that no test depends on (a test
kills processes, never the machine). `tests/journeys/test_operations.py` took 89 s there and 60 s
in memory, with the same checks.

The choice is made once per run, by the first test process, and handed down in `MA_TEST_SCRATCH`,
so that nested sessions and every worker share one folder (and so the port claims kept in it: see
`tests/support/services.py`). Set `MA_TEST_SCRATCH` to a folder to choose it yourself. The full-disk
tests mount small file systems of their own (`tests/support/disks.py`) and are not affected.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ENV = "MA_TEST_SCRATCH"
MEMORY = Path("/dev/shm")
# A full run holds at most a few GB there at once (each worker's current test, the session servers,
# and what a failed test keeps); below this much free room the run stays on the disk.
ROOM_BYTES = 8 << 30


def _choose() -> Path:
    """`/dev/shm/market-analyst-tests-UID` when it is writable and has `ROOM_BYTES` free, else the
    system's temporary folder."""
    if MEMORY.is_dir() and os.access(MEMORY, os.W_OK | os.X_OK):
        stats = os.statvfs(MEMORY)
        if stats.f_bavail * stats.f_frsize >= ROOM_BYTES:
            return MEMORY / f"market-analyst-tests-{os.getuid()}"
    return Path(tempfile.gettempdir())


def use_scratch() -> Path:
    """Point this process's `TMPDIR` (and so its children's) at the run's scratch folder, made
    owner-only if it is new; returns it."""
    chosen = os.environ.get(ENV) or str(_choose())
    folder = Path(chosen)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ[ENV] = os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None  # `tempfile` reads TMPDIR again at its next call
    return folder
