"""The archive survives damage: listings skip what they cannot read with one warning naming it, `show`
names it and exits 2, the index is a cache rebuilt when unreadable, and an archive this user cannot
write still lists. Through the real CLI, on a real directory."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.cli import Cli


@pytest.fixture
def published(cli: Cli) -> tuple[Cli, list[str]]:
    """Two published reports (NVDA, MSFT) in the CLI's archive; returns their keys."""
    keys = []
    for ticker in ("NVDA", "MSFT"):
        thread = cli.ok("analyze", ticker, "--json").json()["thread_id"]
        keys.append(cli.ok("approve", thread, "--json").json()["publication"]["key"])
    assert len(cli.ok("reports", "list", "--json").json()) == 2  # both indexed
    return cli, keys


def _archive(cli: Cli) -> Path:
    return cli.data_dir / "reports"


def _lists_with_one_warning(cli: Cli, naming: str, expected: list[str]) -> None:
    for args in (("reports", "list", "--json"), ("reports", "search", "--ticker", "NVDA", "--json")):
        result = cli.run(*args)
        assert result.returncode == 0, result.stderr
        warnings = result.stderr.strip().splitlines()
        assert len(warnings) == 1 and warnings[0].startswith("warning: ") and naming in warnings[0], warnings
        keys = sorted(r["key"] for r in json.loads(result.stdout))
        wanted = expected if args[1] == "list" else [k for k in expected if k.startswith("NVDA")]
        assert keys == sorted(wanted)


def test_a_dangling_link_is_skipped_with_a_warning(published: tuple[Cli, list[str]]):
    cli, keys = published
    (_archive(cli) / "x.json").symlink_to("/nonexistent")
    _lists_with_one_warning(cli, "x.json", keys)
    assert "x.json" in cli.fails("reports", "show", "x").stderr


def test_a_link_to_another_report_is_not_a_second_report(published: tuple[Cli, list[str]]):
    cli, keys = published
    (_archive(cli) / "copy.json").symlink_to(_archive(cli) / f"{keys[0]}.json")
    _lists_with_one_warning(cli, "copy.json", keys)
    shown = cli.fails("reports", "show", "copy")
    assert shown.returncode == 2 and "copy.json" in shown.stderr


@pytest.mark.parametrize(
    "damage",
    [
        lambda doc: doc | {"report": "x"},  # the right schema version, wrong types
        lambda doc: {k: v for k, v in doc.items() if k != "markdown"},  # a field missing
        lambda doc: doc | {"schema_version": 99},
    ],
    ids=["wrong-types", "no-markdown", "unknown-version"],
)
def test_an_invalid_document_is_skipped_by_listings_and_named_by_show(published, damage):
    cli, keys = published
    path = _archive(cli) / f"{keys[0]}.json"
    path.write_text(json.dumps(damage(json.loads(path.read_text()))))
    _lists_with_one_warning(cli, f"{keys[0]}.json", keys[1:])
    shown = cli.fails("reports", "show", keys[0])
    assert shown.returncode == 2 and f"{keys[0]}.json" in shown.stderr
    assert keys[1] in cli.ok("reports", "show", keys[1]).stdout


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_an_unreadable_index_is_rebuilt_with_one_warning(published: tuple[Cli, list[str]], damage: str):
    cli, keys = published
    index = _archive(cli) / ".index.sqlite3"
    cli.ok("reports", "list")  # settle the write-ahead log into the file
    for extra in (Path(f"{index}-wal"), Path(f"{index}-shm")):
        extra.unlink(missing_ok=True)
    if damage == "garbage":
        index.write_bytes(os.urandom(9000))
    else:
        index.write_bytes(index.read_bytes()[:4096])
    _lists_with_one_warning_then_none(cli, ".index.sqlite3", keys)


def _lists_with_one_warning_then_none(cli: Cli, naming: str, keys: list[str]) -> None:
    first = cli.run("reports", "list", "--json")
    assert first.returncode == 0, first.stderr
    assert sorted(r["key"] for r in first.json()) == sorted(keys)
    [warning] = first.stderr.strip().splitlines()
    assert naming in warning and "rebuilt" in warning
    second = cli.ok("reports", "list", "--json")  # rebuilt: no warning the second time
    assert second.stderr == "" and sorted(r["key"] for r in second.json()) == sorted(keys)


@contextmanager
def _unwritable(directory: Path) -> Iterator[None]:
    """`directory` read-only for this user: its mode for a regular user; the immutable attribute as
    root, whom modes do not stop."""
    if os.geteuid() != 0:
        os.chmod(directory, 0o500)
        try:
            yield
        finally:
            os.chmod(directory, 0o700)
        return
    subprocess.run(["chattr", "+i", str(directory)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


@pytest.mark.parametrize("with_index", [True, False])
def test_an_archive_this_user_cannot_write_still_lists(published: tuple[Cli, list[str]], with_index: bool):
    cli, keys = published
    if not with_index:
        for name in (".index.sqlite3", ".index.sqlite3-wal", ".index.sqlite3-shm"):
            (_archive(cli) / name).unlink(missing_ok=True)
    with _unwritable(_archive(cli)):
        assert not (_archive(cli) / "probe").exists()
        with pytest.raises(OSError):
            (_archive(cli) / "probe").write_text("x")
        listed = cli.ok("reports", "list", "--json")
        assert sorted(r["key"] for r in listed.json()) == sorted(keys)
        found = cli.ok("reports", "search", "--ticker", "MSFT", "--json").json()
        assert [r["key"] for r in found] == [keys[1]]


def test_an_archive_dir_that_is_a_file_is_one_line(cli: Cli, tmp_path: Path):
    (tmp_path / "a-file").write_text("")
    for args in (("reports", "list"), ("reports", "search", "x"), ("reports", "show", "k")):
        result = cli.fails(*args, extra_env={"MA_ARCHIVE_DIR": str(tmp_path / "a-file")})
        assert result.returncode == 2 and "is a file, not a directory" in result.stderr


def test_a_temporary_file_left_by_a_kill_is_removed_by_the_next_publish(published: tuple[Cli, list[str]]):
    cli, _ = published
    old = _archive(cli) / ".NVDA-2025-02-14-0123456789abcdef.4242.deadbeef.tmp"
    recent = _archive(cli) / ".MSFT-2021-03-31-0123456789abcdef.4243.deadbeef.tmp"
    for leftover in (old, recent):
        leftover.write_text("{}")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    thread = cli.ok("analyze", "TSLA", "--json").json()["thread_id"]
    cli.ok("approve", thread)
    assert not old.exists()
    assert recent.exists()  # a writer may still be working on a recent one
