"""The report archive in PostgreSQL (`MA_RECORDS=postgres`) against the directory archive: the rules
both must share, run on each (publish once, refusals, listing, search, removal), and publication
races between real processes on a real server."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from market_analyst.deps import open_archive
from market_analyst.errors import UserError
from market_analyst.persistence.archive.base import ArchiveError
from market_analyst.persistence.archive.document import render_document
from market_analyst.ports import ReportStore
from market_analyst.settings import Settings
from tests.conformance.test_archive import _document
from tests.support import SHARED_RECORDS, archive_child
from tests.support.cli import Cli, run_with_kill, unique_id
from tests.support.crashkit import Harness

ARCHIVES = ("directory", "postgres")


def records_env(tmp_path: Path, postgres_url: str, kind: str) -> dict[str, str]:
    """Settings for an archive of `kind` in this test's data directory and database."""
    env = {"MA_DATA_DIR": str(tmp_path / "data"), "POSTGRES_URL": postgres_url}
    return env | (SHARED_RECORDS if kind == "postgres" else {})


@pytest.fixture(params=ARCHIVES)
def archive(request: pytest.FixtureRequest, tmp_path: Path) -> ReportStore:
    """An empty archive of each kind, opened the way the commands open it."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else "postgresql:///unused"
    return open_archive(Settings.load(environ=records_env(tmp_path, url, request.param), dotenv=None))


def test_open_archive_follows_ma_records(tmp_path: Path):
    env = records_env(tmp_path, "postgresql://u:secret@db.example/x", "postgres")
    archive = open_archive(Settings.load(environ=env, dotenv=None))
    assert type(archive).__name__ == "PostgresArchive"
    assert "secret" not in archive.location and "db.example" in archive.location
    files = open_archive(Settings.load(environ=env | {"MA_RECORDS": "files"}, dotenv=None))
    assert type(files).__name__ == "ReportArchive"


def test_same_operation_twice_returns_the_stored_document(archive: ReportStore):
    first = archive.publish("k1", _document("k1"))
    second = archive.publish("k1", _document("k1"))
    assert first.created and not second.created
    assert render_document(second.document) == render_document(_document("k1"))
    assert [r.key for r in archive.list().reports] == ["k1"]


def test_same_operation_with_other_content_is_refused_not_overwritten(archive: ReportStore):
    archive.publish("k1", _document("k1"))
    with pytest.raises(ArchiveError, match="already published with different content"):
        archive.publish("k1", _document("k1", text="another story"))
    other = dict(_document("k1"), operation_id="another-op")
    with pytest.raises(ArchiveError, match="another operation's report"):
        archive.publish("k1", other)
    assert render_document(archive.get("k1") or {}) == render_document(_document("k1"))


def test_one_operation_under_two_keys_is_refused_on_postgres(tmp_path: Path, postgres_url: str):
    archive = open_archive(
        Settings.load(environ=records_env(tmp_path, postgres_url, "postgres"), dotenv=None)
    )
    archive.publish("k1", _document("k1"))
    with pytest.raises(ArchiveError, match="already published under archive key k1"):
        archive.publish("k2", dict(_document("k2"), operation_id=_document("k1")["operation_id"]))
    assert archive.get("k2") is None


@pytest.mark.parametrize("key", ["../etc/passwd", "a/b", "k1\n"])
def test_keys_that_could_not_name_a_file_are_refused(archive: ReportStore, key: str):
    with pytest.raises(ArchiveError, match="invalid archive key"):
        archive.publish(key, _document("k"))
    with pytest.raises(ArchiveError, match="invalid archive key"):
        archive.get(key)
    assert archive.list().reports == []


def test_search_by_ticker_user_and_text(archive: ReportStore):
    archive.publish("a", _document("a", ticker="NVDA", user="ann", text="Chips and Data Centres"))
    archive.publish("b", _document("b", ticker="MSFT", user="ann", text="cloud growth, trend: up"))
    archive.publish("c", _document("c", ticker="NVDA", user="cy", text="gaming"))
    assert [r.key for r in archive.search(ticker="nvda").reports] == ["c", "a"]
    assert [r.key for r in archive.search(user_id="ann").reports] == ["b", "a"]
    assert [r.key for r in archive.search(text="data centres").reports] == ["a"]
    assert [r.key for r in archive.search(text="DATA CENTRES").reports] == ["a"]
    assert [r.key for r in archive.search(text="trend: up").reports] == ["b"]
    assert [r.key for r in archive.search(text="centres data").reports] == []  # words in order
    assert [r.key for r in archive.search(text=": ").reports] == ["b"]  # no words: substring alone
    assert [r.key for r in archive.search(ticker="NVDA", user_id="cy").reports] == ["c"]
    assert archive.search(text="nowhere").reports == []
    page = archive.search(limit=2)
    assert [r.key for r in page.reports] == ["c", "b"] and page.more == 1
    assert page.reports[0].to_json()["headline"] == "NVDA headline"


def test_newest_first_by_time_then_key(archive: ReportStore):
    for key, at in (
        ("b", "2025-02-15T00:00:00+00:00"),
        ("a", "2025-02-16T00:00:00+00:00"),
        ("c", "2025-02-15T00:00:00+00:00"),
    ):
        archive.publish(key, dict(_document(key), created_at=at))
    assert [r.key for r in archive.list().reports] == ["a", "c", "b"]


def test_remove_deletes_the_document(archive: ReportStore):
    archive.publish("a", _document("a"))
    archive.publish("b", _document("b"))
    assert archive.remove("a") is True
    assert archive.remove("a") is False
    assert archive.get("a") is None
    assert [r.key for r in archive.list().reports] == ["b"]
    assert archive.check() == "ok"


def test_postgres_refuses_a_document_it_cannot_store_exactly(tmp_path: Path, postgres_url: str):
    archive = open_archive(
        Settings.load(environ=records_env(tmp_path, postgres_url, "postgres"), dotenv=None)
    )
    with pytest.raises(ArchiveError, match="k1"):
        archive.publish("k1", dict(_document("k1"), approval_note="nul \x00 byte"))
    with pytest.raises(ArchiveError, match="k1"):
        archive.publish("k1", dict(_document("k1"), score=float("nan")))
    assert archive.get("k1") is None


def test_postgres_that_does_not_answer_is_service_unavailable(tmp_path: Path):
    from market_analyst.errors import ServiceUnavailable

    env = records_env(tmp_path, "postgresql://u@127.0.0.1:9/x?connect_timeout=2", "postgres")
    with pytest.raises(ServiceUnavailable, match="cannot connect to PostgreSQL"):
        open_archive(Settings.load(environ=env, dotenv=None)).get("k1")


def test_the_schema_is_created_once_with_its_indexes(tmp_path: Path, postgres_url: str):
    archive = open_archive(
        Settings.load(environ=records_env(tmp_path, postgres_url, "postgres"), dotenv=None)
    )
    archive.list()
    archive.list()
    with psycopg.connect(postgres_url) as conn:
        versions = conn.execute(
            "SELECT version FROM ma_records_migrations WHERE component = 'archive'"
        ).fetchall()
        indexes = {
            row[0]
            for row in conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'ma_archive_reports'")
        }
    assert sorted(versions) == [(v,) for v in range(1, 7)]
    assert any("USING gin (search)" in d for d in indexes)
    assert any("(ticker, created_at DESC, key DESC)" in d for d in indexes)


# -- real processes at once ------------------------------------------------------------------------


def _race(harness: Harness, env: dict[str, str], documents: list[dict]) -> list[dict]:
    """One process per document, each with its archive open, all let go to publish at the same
    moment; their answers."""
    return harness.call_together(
        archive_child.publish, [(env, document) for document in documents], setup=archive_child.open_for
    )


def test_processes_publishing_one_operation_at_once_store_one_row(
    tmp_path: Path, postgres_url: str, harness: Harness
):
    env = records_env(tmp_path, postgres_url, "postgres")
    answers = _race(harness, env, [_document("k1")] * 4)
    assert sorted(a["created"] for a in answers) == [False] * 3 + [True]
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM ma_archive_reports").fetchone() == (1,)


def test_processes_publishing_one_operation_with_other_content_at_once(
    tmp_path: Path, postgres_url: str, harness: Harness
):
    env = records_env(tmp_path, postgres_url, "postgres")
    versions = [_document("k1", text=f"story {i}") for i in range(4)]
    answers = _race(harness, env, versions)
    winners = [a for a in answers if a.get("created")]
    refusals = [a for a in answers if "error" in a]
    assert len(winners) == 1 and len(refusals) == 3, answers
    assert all("refusing to overwrite" in a["error"] for a in refusals)
    stored = open_archive(Settings.load(environ=env, dotenv=None)).get("k1")
    assert stored is not None and render_document(stored) in {render_document(v) for v in versions}
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM ma_archive_reports").fetchone() == (1,)


def test_processes_publishing_different_reports_at_once_all_land(
    tmp_path: Path, postgres_url: str, harness: Harness
):
    env = records_env(tmp_path, postgres_url, "postgres")
    documents = [_document(f"k{i}", ticker=("NVDA", "MSFT")[i % 2]) for i in range(6)]
    answers = _race(harness, env, documents)
    assert all(a["created"] for a in answers), answers
    archive = open_archive(Settings.load(environ=env, dotenv=None))
    assert sorted(r.key for r in archive.list().reports) == [f"k{i}" for i in range(6)]
    for document in documents:
        assert render_document(archive.get(document["key"]) or {}) == render_document(document)


def test_a_bad_records_choice_is_one_line(tmp_path: Path):
    with pytest.raises(UserError, match="MA_RECORDS"):
        Settings.load(environ={"MA_RECORDS": "sqlite", "MA_DATA_DIR": str(tmp_path)}, dotenv=None)


# -- the real CLI on MA_RECORDS=postgres -----------------------------------------------------------

FIXED_CLOCK = {"SOURCE_DATE_EPOCH": "1739577600"}  # the same approval time in both stores


def _publish(cli: Cli, ticker: str, thread: str, user: str = "ann") -> str:
    cli.ok("analyze", ticker, "--thread-id", thread, "--user", user)
    cli.ok("approve", thread, "--user", "bob")
    return cli.ok("status", thread, "--json").json()["publication"]["key"]


def _rows(postgres_url: str) -> list[str]:
    with psycopg.connect(postgres_url) as conn:
        return [row[0] for row in conn.execute("SELECT key FROM ma_archive_reports ORDER BY key")]


def test_cli_reports_on_postgres_match_the_directory_archive(cli: Cli, fresh_cli, tmp_path: Path):
    """Publish, list, search, show and show --html give the same answers from both archives."""
    directory = fresh_cli()
    cli.env.update(FIXED_CLOCK | SHARED_RECORDS)
    directory.env.update(FIXED_CLOCK)
    keys = [_publish(c, t, f"same-{t}") for c in (cli, directory) for t in ("NVDA", "MSFT")]
    assert keys[:2] == keys[2:]
    assert cli.archive_files() == [] and len(directory.archive_files()) == 2
    assert sorted(_rows(cli.env["POSTGRES_URL"])) == sorted(keys[:2])
    for args in (
        ("reports", "list", "--json"),
        ("reports", "search", "--ticker", "MSFT", "--json"),
        ("reports", "search", "bundled snapshot, as of 2025-02-14", "--json"),
        ("reports", "search", "--user", "nobody", "--json"),
        ("reports", "show", keys[0], "--json"),
        ("reports", "show", keys[1]),
    ):
        assert cli.ok(*args).stdout == directory.ok(*args).stdout, args
    pages = []
    for c, name in ((cli, "pg.html"), (directory, "dir.html")):
        c.ok("reports", "show", keys[0], "--html", str(tmp_path / name))
        pages.append((tmp_path / name).read_bytes())
    assert pages[0] == pages[1] and b"data:image/" in pages[0]
    document = cli.ok("reports", "show", keys[0], "--json").json()
    assert render_document(document) == (directory.data_dir / "reports" / f"{keys[0]}.json").read_bytes()
    missing = cli.fails("reports", "show", "NVDA-2025-02-14-0000000000000000")
    assert "PostgreSQL archive" in missing.stderr and missing.returncode == 2
    assert "invalid archive key" in cli.fails("reports", "show", "../x").stderr


def test_cli_forget_and_prune_reach_the_postgres_archive(cli: Cli):
    cli.env.update(SHARED_RECORDS)
    ann = _publish(cli, "NVDA", "t-ann", user="ann")
    cy = _publish(cli, "MSFT", "t-cy", user="cy")
    cli.ok("prune", "--finished-before", "0d", "--yes")
    assert _rows(cli.env["POSTGRES_URL"]) == sorted([ann, cy])  # prune keeps reports
    dry = cli.ok("forget", "--user", "ann", "--dry-run", "--json").json()
    assert dry["reports"] == [ann] and len(_rows(cli.env["POSTGRES_URL"])) == 2
    cli.ok("forget", "--user", "ann", "--yes")
    assert _rows(cli.env["POSTGRES_URL"]) == [cy]
    assert cli.ok("reports", "list", "--user", "ann", "--json").json() == []


def test_cli_publish_killed_after_the_postgres_write_publishes_once(cli: Cli):
    cli.env.update({**SHARED_RECORDS, "MA_LEASE_TTL_SECONDS": "2"})
    thread = unique_id("pg-crash")
    cli.ok("analyze", "NVDA", "--thread-id", thread)
    assert run_with_kill(cli, "after-archive-write", "approve", thread, "--user", "bob").returncode == -9
    assert len(_rows(cli.env["POSTGRES_URL"])) == 1
    again = cli.ok("approve", thread, "--user", "bob")
    assert "already held this operation's report" in again.stdout
    assert len(_rows(cli.env["POSTGRES_URL"])) == 1
    assert cli.ok("status", thread, "--json").json()["status"] == "published"


def test_cli_concurrent_approvals_publish_one_row(cli: Cli):
    cli.env.update(SHARED_RECORDS)
    race = unique_id("pg-race")
    cli.ok("analyze", "NVDA", "--thread-id", race)
    assert cli.harness is not None
    outcomes = cli.harness.run_together(
        [(["approve", race, "--user", f"approver{i}"], cli.env) for i in range(4)], cwd=cli.cwd, at_once=True
    )
    codes = [(o.returncode, o.stderr) for o in outcomes]
    assert sorted(code for code, _ in codes) == [0, 2, 2, 2], codes
    assert all("Traceback" not in err for _, err in codes)
    assert len(_rows(cli.env["POSTGRES_URL"])) == 1


def test_cli_postgres_archive_unreachable_is_one_line_exit_69(cli: Cli):
    cli.env.update({"MA_RECORDS": "postgres", "POSTGRES_URL": "postgresql://u@127.0.0.1:9/x"})
    result = cli.run("reports", "list")
    assert result.returncode == 69, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
