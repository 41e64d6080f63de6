"""`records migrate --to postgres`: the directory archive copied into PostgreSQL, every document
identical byte for byte, safe to run twice, finished by a second run after a `kill -9`, and the
source untouched."""

from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg

from market_analyst.persistence.archive.document import render_document
from tests.support.cli import Cli
from tests.support.reports import report_document, write_reports
from tests.test_exactly_once import run_with_kill

BIG = 10_000
# The copy's batches (postgres.COPY_BATCH each): the killed run dies after this many committed.
KILL_AFTER_BATCHES = 4


def tree_digest(root: Path) -> str:
    """A digest of every name, mode, size, modification time and byte under `root`."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        digest.update(f"{path.relative_to(root)}|{stat.st_mode}|{stat.st_size}|{stat.st_mtime_ns}".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def stored(postgres_url: str) -> dict[str, tuple[bytes, str]]:
    """Each stored report's SHA-256 (of its exact bytes) and row version (xmin: changes whenever the
    row is rewritten)."""
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT key, sha256(convert_to(body, 'UTF8')), xmin::text FROM ma_archive_reports"
        ).fetchall()
    return {key: (bytes(digest), xmin) for key, digest, xmin in rows}


def file_digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def test_migrate_ten_thousand_reports_killed_then_twice(cli: Cli):
    source = cli.data_dir / "reports"
    keys = write_reports(source, BIG)
    before = tree_digest(cli.data_dir)

    batch = "market_analyst.persistence.archive.postgres:PostgresArchive._copy_batch"
    kill = f"call:after:{batch}:{KILL_AFTER_BATCHES}"
    killed = run_with_kill(cli, kill, "records", "migrate", "--to", "postgres")
    assert killed.returncode == -9, killed.stderr
    partial = stored(cli.env["POSTGRES_URL"])
    assert 0 < len(partial) < BIG  # the committed batches stayed, the rest had not started

    first = cli.ok("records", "migrate", "--to", "postgres", "--json").json()
    [archive] = first["stores"]
    assert (archive["copied"], archive["present"]) == (BIG - len(partial), len(partial))
    assert first["changed"] is True

    rows = stored(cli.env["POSTGRES_URL"])
    assert sorted(rows) == sorted(keys)
    for key in keys:  # every document identical, byte for byte, to its file
        assert rows[key][0] == file_digest(source / f"{key}.json"), key
    assert all(rows[key] == partial[key] for key in partial)  # the killed run's rows were not rewritten

    again = cli.ok("records", "migrate", "--to", "postgres")
    assert f"archive: 0 reports copied, {BIG} already present" in again.stdout
    assert "Nothing changed" in again.stdout
    assert stored(cli.env["POSTGRES_URL"]) == rows  # no row rewritten
    assert tree_digest(cli.data_dir) == before  # the source is only read

    cli.env["MA_RECORDS"] = "postgres"
    listed = cli.ok("reports", "list", "--limit", "3", "--json").json()
    newest = sorted(((report_document(i)["created_at"], k) for i, k in enumerate(keys)), reverse=True)[:3]
    assert [r["key"] for r in listed] == [k for _, k in newest]
    shown = cli.ok("reports", "show", keys[7], "--json").json()
    assert render_document(shown) == (source / f"{keys[7]}.json").read_bytes()


def test_migrate_reports_a_conflict_and_overwrites_nothing(cli: Cli):
    source = cli.data_dir / "reports"
    keys = write_reports(source, 3)
    cli.env["MA_RECORDS"] = "postgres"
    other = dict(report_document(1), approval_note="published on another host")
    cli.run("reports", "list")  # the archive's tables exist once a command has used them
    with psycopg.connect(cli.env["POSTGRES_URL"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ma_archive_reports (key, operation_id, ticker, user_id, created_at, approved_by, "
            "recommendation, as_of, headline, search_text, body) "
            "VALUES (%s, %s, 'NVDA', 'u', 't', 'b', 'r', 'a', 'h', 's', %s)",
            (keys[1], other["operation_id"], render_document(other).decode()),
        )
    result = cli.fails("records", "migrate", "--to", "postgres")
    assert result.returncode == 2
    assert f"1 reports in {source} differ" in result.stderr and keys[1] in result.stderr
    assert "nothing was overwritten (2 copied, 0 already present)" in result.stderr
    rows = stored(cli.env["POSTGRES_URL"])
    assert rows[keys[1]][0] == hashlib.sha256(render_document(other)).digest()  # left as it was
    assert rows[keys[0]][0] == file_digest(source / f"{keys[0]}.json")
    # Run again: still refused, and still nothing overwritten.
    assert (
        "nothing was overwritten (0 copied, 2 already present)"
        in cli.fails("records", "migrate", "--to", "postgres").stderr
    )
    assert stored(cli.env["POSTGRES_URL"]) == rows


def test_migrate_names_an_unreadable_document_and_copies_the_rest(cli: Cli):
    source = cli.data_dir / "reports"
    keys = write_reports(source, 3)
    damaged = source / f"{keys[2]}.json"
    damaged.write_bytes(damaged.read_bytes()[:40])
    result = cli.fails("records", "migrate", "--to", "postgres")
    assert result.returncode == 2 and f"{keys[2]}.json" in result.stderr
    assert "the others were (2 copied, 0 already present)" in result.stderr
    assert sorted(stored(cli.env["POSTGRES_URL"])) == sorted(keys[:2])


def test_migrate_an_empty_archive_says_so(cli: Cli):
    out = cli.ok("records", "migrate", "--to", "postgres").stdout
    assert "archive: no reports in" in out and "Nothing changed" in out
    assert not (cli.data_dir / "reports").exists()


def test_migrate_errors_are_one_line(cli: Cli, tmp_path: Path):
    assert cli.fails("records", "migrate", "--to", "sqlite").returncode == 2
    assert "--to" in cli.run("records", "migrate").stderr
    archive_file = tmp_path / "not-a-dir"
    archive_file.write_text("")
    result = cli.fails(
        "records", "migrate", "--to", "postgres", extra_env={"MA_ARCHIVE_DIR": str(archive_file)}
    )
    assert result.returncode == 2 and "is a file, not a directory" in result.stderr
    down = cli.fails(
        "records", "migrate", "--to", "postgres", extra_env={"POSTGRES_URL": "postgresql://u@127.0.0.1:9/x"}
    )
    assert down.returncode == 69 and "cannot connect to PostgreSQL" in down.stderr
