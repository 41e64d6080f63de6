"""A real small disk to fill: a tmpfs mounted as root (ENVIRONMENT.md), for the full-disk tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(at: Path, size: str = "256k") -> Iterator[Path]:
    """A real file system of `size` mounted at `at` for the block; fails the test on CI when it
    cannot be mounted, and skips it elsewhere (not root)."""
    at.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(at)], capture_output=True
    )
    if proc.returncode != 0:
        reason = f"cannot mount a small tmpfs here ({proc.stderr.decode().strip() or 'not root'})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill `disk` with a file of zeros until it is full, then give `leave` bytes of it back."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass  # full
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler
