"""Places a store cannot use: a data directory under a regular file, and a full disk. Each is one
line on stderr and exit 2, never an empty answer, a traceback or a half-written file."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import Cli


@pytest.mark.parametrize(
    "command",
    [
        ["profile", "show", "--user", "ann"],
        ["profile", "show", "--user", "ann", "--json"],
        ["profile", "delete", "--user", "ann"],
        ["reports", "list"],
        ["reports", "search", "drawdown"],
    ],
)
def test_a_data_directory_under_a_file_is_an_error_not_an_empty_store(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a regular file\n")
    refused = cli.fails(*command, extra_env={"MA_DATA_DIR": str(blocker / "data")})
    assert refused.returncode == 2 and refused.stdout == ""
    assert "lies under a file" in refused.stderr and str(blocker) in refused.stderr
    assert blocker.read_text() == "a regular file\n"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB file system (tmpfs, mounted as root) to fill up."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if proc.returncode != 0:
        reason = f"cannot mount a small tmpfs here ({proc.stderr.decode().strip() or 'not root'})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> None:
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass  # full
    finally:
        os.close(fd)


def test_approvers_add_on_a_full_disk_is_one_line_and_changes_nothing(cli: Cli, small_disk: Path) -> None:
    env = {"MA_DATA_DIR": str(small_disk / "data")}
    cli.ok("approvers", "add", "carl", extra_env=env)
    before = (small_disk / "data" / "approvers.json").read_bytes()
    _fill(small_disk)
    refused = cli.fails("approvers", "add", "ann", extra_env=env)
    assert refused.returncode == 2 and "No space left on device" in refused.stderr
    assert refused.stdout == ""  # no token printed for an approver that was not stored
    assert (small_disk / "data" / "approvers.json").read_bytes() == before
    assert sorted(p.name for p in (small_disk / "data").iterdir()) == [".approvers.lock", "approvers.json"]
    listed = cli.ok("approvers", "list", extra_env=env).stdout
    assert "carl" in listed and "ann" not in listed
