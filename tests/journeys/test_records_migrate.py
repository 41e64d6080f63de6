"""`records migrate --to postgres`: the directory archive copied into PostgreSQL, every document
identical byte for byte, safe to run twice, finished by a second run after a `kill -9`, and the
source untouched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import psycopg

from market_analyst.deps import open_approvers
from market_analyst.persistence.archive.document import render_document
from market_analyst.settings import Settings
from tests.support import SHARED_RECORDS
from tests.support.cli import Cli, run_with_kill
from tests.support.reports import report_document, write_reports

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
    [archive] = [store for store in first["stores"] if store["store"] == "archive"]
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

    cli.env.update(SHARED_RECORDS)
    listed = cli.ok("reports", "list", "--limit", "3", "--json").json()
    newest = sorted(((report_document(i)["created_at"], k) for i, k in enumerate(keys)), reverse=True)[:3]
    assert [r["key"] for r in listed] == [k for _, k in newest]
    shown = cli.ok("reports", "show", keys[7], "--json").json()
    assert render_document(shown) == (source / f"{keys[7]}.json").read_bytes()


def test_migrate_reports_a_conflict_and_overwrites_nothing(cli: Cli):
    source = cli.data_dir / "reports"
    keys = write_reports(source, 3)
    cli.env.update(SHARED_RECORDS)
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


def test_migrate_an_empty_data_directory_says_so(cli: Cli):
    cli.data_dir.mkdir()
    before = tree_digest(cli.data_dir)
    out = cli.ok("records", "migrate", "--to", "postgres").stdout
    assert "archive: no reports in" in out and "audit: no entries in" in out and "Nothing changed" in out
    assert tree_digest(cli.data_dir) == before


def test_migrate_copies_approvers_secret_and_audit_log(cli: Cli):
    token = cli.ok("approvers", "add", "bob").stdout.strip()
    cli.ok("approvers", "add", "cy", "--role", "reviewer")
    cli.ok("analyze", "NVDA", "--thread-id", "t-audit", "--user", "ann")
    cli.ok("approve", "t-audit", "--user", "bob")
    cli.ok("analyze", "MSFT", "--thread-id", "t-reject")
    cli.ok("reject", "t-reject", "--reason", "stale data")
    files = {
        args: cli.ok(*args).stdout for args in (("approvers", "list", "--json"), ("audit", "list", "--json"))
    }
    # The secret signing the web inbox's sessions, made as `serve` makes it on first use.
    secret = open_approvers(Settings.load(environ=cli.env, dotenv=None)).session_secret()
    before = tree_digest(cli.data_dir)

    first = {
        s["store"]: s for s in cli.ok("records", "migrate", "--to", "postgres", "--json").json()["stores"]
    }
    entries = len(json.loads(files[("audit", "list", "--json")]))
    assert entries >= 2
    assert (first["audit"]["copied"], first["audit"]["present"]) == (entries, 0)
    assert (first["approvers"]["copied"], first["approvers"]["present"]) == (3, 0)  # two and the secret
    assert (first["archive"]["copied"], first["archive"]["present"]) == (1, 0)
    again = cli.ok("records", "migrate", "--to", "postgres")
    assert f"audit: 0 entries copied, {entries} already present" in again.stdout
    assert "Nothing changed" in again.stdout
    assert tree_digest(cli.data_dir) == before

    cli.env.update(SHARED_RECORDS)
    for args, output in files.items():  # the same approvers and the same entries, in order
        assert cli.ok(*args).stdout == output, args
    assert "The audit log verifies" in cli.ok("audit", "verify").stdout
    settings = Settings.load(environ=cli.env, dotenv=None)
    assert open_approvers(settings).authenticate(token) is not None  # the token hash came along
    assert open_approvers(settings).session_secret() == secret


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


def test_migrate_refuses_a_session_secret_the_database_has_of_its_own(cli: Cli):
    files_secret = open_approvers(Settings.load(environ=cli.env, dotenv=None)).session_secret()
    postgres = open_approvers(Settings.load(environ=cli.env | SHARED_RECORDS, dotenv=None))
    database_secret = postgres.session_secret()
    assert database_secret != files_secret
    result = cli.fails("records", "migrate", "--to", "postgres")
    assert result.returncode == 2 and "session secret of its own" in result.stderr
    assert postgres.session_secret() == database_secret  # not overwritten
