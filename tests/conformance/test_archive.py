"""The report archive on a real directory: atomic, exactly-once writes; keys that cannot leave the
root; damaged documents skipped by listings and named by `show`; search by ticker, user and text."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from market_analyst.errors import UserError
from market_analyst.persistence.archive.files import ArchiveError, ReportArchive, render_document
from tests.support.cli import Cli


def _document(key: str, *, ticker: str = "NVDA", user: str = "ann", text: str = "steady climb") -> dict:
    return {
        "schema_version": 1,
        "key": key,
        "operation_id": f"thread-{key}:draft",
        "thread_id": f"thread-{key}",
        "user_id": user,
        "ticker": ticker,
        "created_at": "2025-02-15T00:00:00+00:00",
        "approved_by": "bob",
        "approved_at": "2025-02-15T00:00:00+00:00",
        "as_of": "2025-02-14",
        "report": {"recommendation": "buy", "headline": f"{ticker} headline"},
        "markdown": f"# {ticker}\n{text}\n",
    }


@pytest.mark.parametrize("key", ["../etc/passwd", "/abs", "a/b", "..", "", ".hidden", "a\\b", "x" * 200])
def test_keys_that_could_leave_the_root_are_refused(tmp_path: Path, key: str):
    archive = ReportArchive(tmp_path / "reports")
    with pytest.raises(ArchiveError, match="invalid archive key"):
        archive.publish(key, _document("k"))
    with pytest.raises(ArchiveError, match="invalid archive key"):
        archive.get(key)
    assert not (tmp_path / "etc").exists() and not Path("/abs.json").exists()
    assert not list(tmp_path.rglob("*.json"))


def test_a_symlink_out_of_the_root_is_refused(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "victim.json"
    target.write_text("{}")
    root = tmp_path / "reports"
    root.mkdir()
    (root / "evil.json").symlink_to(target)
    archive = ReportArchive(root)
    with pytest.raises(ArchiveError, match="leaves the archive root"):
        archive.publish("evil", _document("evil"))
    with pytest.raises(ArchiveError, match="leaves the archive root"):
        archive.get("evil")
    assert target.read_text() == "{}"
    listing = archive.list()
    assert listing.reports == [] and any("evil" in p for p in listing.problems)


def test_same_operation_twice_returns_the_stored_document(tmp_path: Path):
    archive = ReportArchive(tmp_path / "reports")
    first = archive.publish("k1", _document("k1"))
    second = archive.publish("k1", _document("k1"))
    assert first.created and not second.created
    assert second.document == first.document
    assert [p.name for p in (tmp_path / "reports").iterdir() if not p.name.startswith(".")] == ["k1.json"]


def test_same_operation_with_other_content_is_an_error_not_an_overwrite(tmp_path: Path):
    archive = ReportArchive(tmp_path / "reports")
    archive.publish("k1", _document("k1"))
    before = (tmp_path / "reports" / "k1.json").read_bytes()
    with pytest.raises(ArchiveError, match="already published with different content"):
        archive.publish("k1", _document("k1", text="another story"))
    assert (tmp_path / "reports" / "k1.json").read_bytes() == before


def test_writes_leave_no_temporary_files(tmp_path: Path):
    archive = ReportArchive(tmp_path / "reports")
    for i in range(5):
        archive.publish(f"k{i}", _document(f"k{i}"))
    names = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert [n for n in names if n.endswith(".tmp")] == []
    assert (tmp_path / "reports" / "k0.json").read_bytes() == render_document(_document("k0"))


def test_an_archive_directory_that_cannot_be_written_is_a_clear_error(tmp_path: Path):
    root = tmp_path / "reports"
    root.mkdir()
    os.chmod(root, 0o500)
    try:
        if os.access(root, os.W_OK):  # root ignores permissions: use a path below a regular file
            root = tmp_path / "file"
            root.write_text("")
            root = root / "reports"
        with pytest.raises(UserError, match="(cannot (write to|create) archive directory|lies under a file)"):
            ReportArchive(root).publish("k1", _document("k1"))
    finally:
        os.chmod(tmp_path / "reports", 0o700)


def test_search_by_ticker_user_and_text(tmp_path: Path):
    archive = ReportArchive(tmp_path / "reports")
    archive.publish("a", _document("a", ticker="NVDA", user="ann", text="Chips and Data Centres"))
    archive.publish("b", _document("b", ticker="MSFT", user="ann", text="cloud growth"))
    archive.publish("c", _document("c", ticker="NVDA", user="cy", text="gaming"))
    # Newest first; these share a time stamp, so the key decides.
    assert [r.key for r in archive.search(ticker="nvda").reports] == ["c", "a"]
    assert [r.key for r in archive.search(user_id="ann").reports] == ["b", "a"]
    assert [r.key for r in archive.search(text="data centres").reports] == ["a"]
    assert [r.key for r in archive.search(ticker="NVDA", user_id="cy").reports] == ["c"]
    assert archive.search(text="nowhere").reports == []


def test_listing_indexes_documents_it_has_not_seen(tmp_path: Path):
    """A document written by a process that died before indexing it is listed all the same."""
    archive = ReportArchive(tmp_path / "reports")
    archive.publish("a", _document("a"))
    (tmp_path / "reports" / "late.json").write_bytes(render_document(_document("late")))
    assert [r.key for r in archive.list().reports] == ["late", "a"]
    (tmp_path / "reports" / "late.json").unlink()
    assert [r.key for r in archive.list().reports] == ["a"]


def _publish_two(cli: Cli) -> list[str]:
    keys = []
    for ticker in ("NVDA", "MSFT"):
        thread = cli.ok("analyze", ticker, "--json").json()["thread_id"]
        cli.ok("approve", thread)
        keys.append(cli.ok("status", thread, "--json").json()["publication"]["key"])
    return keys


def test_cli_truncated_document_is_skipped_by_list_and_named_by_show(cli: Cli):
    good, damaged = _publish_two(cli)
    assert len(cli.ok("reports", "list", "--json").json()) == 2  # both indexed
    path = cli.data_dir / "reports" / f"{damaged}.json"
    path.write_bytes(path.read_bytes()[:50])

    listed = cli.run("reports", "list", "--json")
    assert listed.returncode == 0
    assert [r["key"] for r in json.loads(listed.stdout)] == [good]
    assert "warning" in listed.stderr and f"{damaged}.json" in listed.stderr

    shown = cli.fails("reports", "show", damaged)
    assert f"{damaged}.json" in shown.stderr and "corrupted" in shown.stderr
    assert good in cli.ok("reports", "show", good, "--json").stdout


@pytest.mark.parametrize("key", ["../etc/passwd", "/abs", "a/b"])
def test_cli_bad_keys_are_one_line(cli: Cli, key: str):
    assert "invalid archive key" in cli.fails("reports", "show", key).stderr


def test_cli_search_and_filters(cli: Cli):
    nvda, msft = _publish_two(cli)
    assert [r["key"] for r in cli.ok("reports", "search", "--ticker", "MSFT", "--json").json()] == [msft]
    assert [r["key"] for r in cli.ok("reports", "list", "--ticker", "NVDA", "--json").json()] == [nvda]
    found = cli.ok("reports", "search", "bundled snapshot, as of 2025-02-14", "--json").json()
    assert [r["key"] for r in found] == [nvda]
    assert cli.ok("reports", "search", "--user", "nobody", "--json").json() == []
    assert "needs text" in cli.fails("reports", "search").stderr


def test_a_trailing_newline_is_not_a_valid_key(tmp_path: Path):
    with pytest.raises(ArchiveError, match="invalid archive key"):
        ReportArchive(tmp_path / "reports").publish("k1\n", _document("k1"))
