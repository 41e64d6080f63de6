"""Places a store cannot use: a data directory under a regular file, and a full disk. Each is one
line on stderr and exit 2, never an empty answer, a traceback or a half-written file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import disks
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
    with disks.small_disk(tmp_path / "small-disk") as mount:
        yield mount


def _fill(disk: Path) -> None:
    disks.fill(disk)


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


def _audit_files(data: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (data / "audit").iterdir()}


def test_an_approval_on_a_full_disk_leaves_the_audit_log_whole(cli: Cli, small_disk: Path) -> None:
    """The audit append meets a full disk: one line, and the log exactly as it was (a part of a line
    would make every later read of it refuse). With space back, the same approval goes through.
    Only the audit log's folder is on the small disk."""
    data = small_disk.parent / "data"
    data.mkdir(mode=0o700)
    (small_disk / "audit").mkdir(mode=0o700)
    (data / "audit").symlink_to(small_disk / "audit")
    env = {"MA_DATA_DIR": str(data)}
    thread = cli.ok("analyze", "NVDA", "--user", "ann", "--json", extra_env=env).json()["thread_id"]
    cli.ok("approve", cli.ok("analyze", "AAPL", "--user", "ann", "--json", extra_env=env).json()["thread_id"],
           "--user", "rev", extra_env=env)  # fmt: skip
    before = _audit_files(data)
    _fill(small_disk)
    refused = cli.fails("approve", thread, "--user", "rev", "--note", "fine " * 200, extra_env=env)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "No space left on device" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert "the entry was not written" in refused.stderr and f"resume {thread}" in refused.stderr
    assert _audit_files(data) == before  # nothing of the entry, no temporary file
    (small_disk / "filler").unlink()
    cli.ok("audit", "verify", extra_env=env)
    cli.ok("approve", thread, "--user", "rev", extra_env=env)
    assert cli.ok("status", thread, "--json", extra_env=env).json()["status"] == "published"
    assert cli.ok("audit", "verify", extra_env=env).returncode == 0


WAITS = "recorded; its memory will be written when the store is free"


def test_the_embedded_stores_on_a_full_disk_say_so_instead_of_dying(cli: Cli, small_disk: Path) -> None:
    """Qdrant Edge maps its files, and a disk that fills under a mapping ends the process with SIGBUS.
    Each store checks for room before Edge opens or builds a shard: one line and exit 2, and a
    decision goes on without its memory."""
    env = {"MA_DATA_DIR": str(small_disk / "data")}
    for command in (
        ("remember", "--user", "ann", "keep an eye on margins"),
        ("profile", "set", "--user", "ann", "--horizon", "long"),
    ):
        refused = cli.fails(*command, extra_env=env)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused
        assert "MB free" in refused.stderr and "the store was not changed" in refused.stderr
    thread = cli.ok("analyze", "NVDA", "--user", "ann", "--json", extra_env=env).json()["thread_id"]
    approved = cli.ok("approve", thread, "--user", "rev", "--note", "fine", extra_env=env)
    assert "Published thread" in approved.stdout and WAITS in approved.stdout
    assert cli.ok("memories", "list", "--user", "ann", "--json", extra_env=env).json() == []


def test_a_memory_store_whose_disk_fills_up_refuses_and_keeps_its_memories(cli: Cli, tmp_path: Path) -> None:
    with disks.small_disk(tmp_path / "disk", size="200m") as disk:
        env = {"MA_DATA_DIR": str(disk / "data")}
        cli.ok("remember", "--user", "ann", "keep an eye on margins", extra_env=env)
        filler = disks.fill(disk)
        for command in (("memories", "list", "--user", "ann"), ("remember", "--user", "ann", "more")):
            refused = cli.fails(*command, extra_env=env)
            assert refused.returncode == 2 and "MB free" in refused.stderr, refused
            assert len(refused.stderr.strip().splitlines()) == 1
        filler.unlink()
        [kept] = cli.ok("memories", "list", "--user", "ann", "--json", extra_env=env).json()
        assert kept["text"] == "keep an eye on margins"
        cli.ok("memories", "check", extra_env=env)
