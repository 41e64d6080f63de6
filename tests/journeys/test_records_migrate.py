"""`records migrate --to postgres`: the directory archive copied into PostgreSQL, every document
identical byte for byte, safe to run twice, finished by a second run after a `kill -9`, and the
source untouched."""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
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
    cy = cli.ok("approvers", "add", "cy", "--role", "reviewer").stdout.strip()
    cli.ok("analyze", "NVDA", "--thread-id", "t-audit", "--user", "ann")
    cli.ok("approve", "t-audit", "--user", "bob")
    cli.ok("analyze", "MSFT", "--thread-id", "t-reject")
    cli.ok("reject", "t-reject", "--reason", "stale data")
    cli.ok("analyze", "AAPL", "--thread-id", "t-waiting", "--user", "ann")  # approved after the switch
    waiting = cli.ok("status", "t-waiting", "--json").json()
    files = {
        args: cli.ok(*args).stdout for args in (("approvers", "list", "--json"), ("audit", "list", "--json"))
    }
    # The secret signing the web inbox's sessions, made as `serve` makes it on first use.
    secret = open_approvers(Settings.load(environ=cli.env, dotenv=None)).session_secret()
    entries = len(json.loads(files[("audit", "list", "--json")]))
    assert entries >= 2
    before = tree_digest(cli.data_dir)

    # The keys go to a database every host shares: wrapped again by the master key they will all use.
    refused = cli.fails("records", "migrate", "--to", "postgres", "--json")
    assert refused.returncode == 2 and "set MA_MASTER_KEY for the copy" in refused.stderr
    copied = {s["store"]: (s["copied"], s["present"]) for s in json.loads(refused.stdout)["stores"]}
    # The other stores were copied all the same: the two approvers and the secret, the log, the report.
    assert copied == {"approvers": (3, 0), "audit": (entries, 0), "archive": (1, 0)}, copied
    shared_key = {"MA_MASTER_KEY": SHARED_RECORDS["MA_MASTER_KEY"]}
    first = cli.ok("records", "migrate", "--to", "postgres", "--json", extra_env=shared_key).json()
    copied = {s["store"]: (s["copied"], s["present"]) for s in first["stores"]}
    assert copied == {"approvers": (0, 3), "keys": (3, 0), "audit": (0, entries), "archive": (0, 1)}, copied
    again = cli.ok("records", "migrate", "--to", "postgres", extra_env=shared_key)
    assert f"audit: 0 entries copied, {entries} already present" in again.stdout
    assert "keys: 0 data keys copied, 3 already present" in again.stdout
    assert "Nothing changed" in again.stdout
    assert tree_digest(cli.data_dir) == before

    cli.env.update(SHARED_RECORDS)
    for args, output in files.items():  # the same approvers and the same entries, in order
        assert cli.ok(*args).stdout == output, args
    assert "The audit log verifies" in cli.ok("audit", "verify").stdout
    settings = Settings.load(environ=cli.env, dotenv=None)
    assert open_approvers(settings).authenticate(token) is not None  # the token hash came along
    assert open_approvers(settings).session_secret() == secret
    # A thread drafted before the switch is read, approved and published after it: its key came along.
    assert cli.ok("status", "t-audit", "--json").json()["status"] == "published"
    assert cli.ok("status", "t-waiting", "--json").json()["request"] == waiting["request"]
    cli.ok("approve", "t-waiting", "--user", "bob")
    assert cli.ok("status", "t-waiting", "--json").json()["status"] == "published"

    # Run again after the switch, the copy brings back nothing the database erased since: not a
    # removed approver (whose token would work again), not a forgotten user's keys or reports.
    assert open_approvers(settings).authenticate(cy) is not None
    cli.ok("approvers", "remove", "cy")
    cli.ok("forget", "--user", "ann", "--yes")
    later = cli.ok("records", "migrate", "--to", "postgres")
    # ann's two threads' keys; her report went from the directory too (forget reaches both archives).
    assert "2 threads' keys erased there since the last copy, not copied back" in later.stdout, later.stdout
    assert open_approvers(Settings.load(environ=cli.env, dotenv=None)).authenticate(cy) is None
    assert "cy" not in cli.ok("approvers", "list").stdout
    assert cli.ok("reports", "list", "--user", "ann", "--json").json() == []


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


def _approve(api, thread: str) -> int:
    draft_id = api.get(f"/api/threads/{thread}").json()["request"]["draft_id"]
    return api.post(f"/api/threads/{thread}/approve", json={"draft_id": draft_id}).status_code


def test_migrate_while_serve_approves_leaves_no_approval_behind_before_or_after_the_switch(cli: Cli, serve):
    shared_key = {"MA_MASTER_KEY": SHARED_RECORDS["MA_MASTER_KEY"]}
    token = cli.ok("approvers", "add", "bob").stdout.strip()
    write_reports(cli.data_dir / "reports", 1500)  # so the copy lasts while the approvals run
    tickers = ["NVDA", "MSFT", "AAPL", "AMZN", "GOOG", "META", "NFLX", "TSLA", "NVDA"]
    with ThreadPoolExecutor(3) as pool:
        threads = list(
            pool.map(
                lambda ticker: cli.ok("analyze", ticker, "--user", "ann", "--json").json()["thread_id"],
                tickers,
            )
        )
    before, during, after_copy, after_switch = threads[:1], threads[1:5], threads[5:8], threads[8:]
    cli.ok("approve", before[0], "--user", "bob")  # the log has a history when the copy starts

    # A host on the files approves while the copy runs: before it, while it holds the log, after it.
    files_host = serve(cli)
    api = files_host.client(token)
    with ThreadPoolExecutor(6) as pool:
        copy = pool.submit(cli.run, "records", "migrate", "--to", "postgres", extra_env=shared_key)
        codes = list(pool.map(lambda thread: (time.sleep(0.3), _approve(api, thread))[1], during))
        migrated = copy.result()
    assert migrated.returncode == 0, migrated.stderr
    assert codes == [200] * len(during)
    # And after the copy ended, before the hosts switch: these are in the files only, for now.
    assert [_approve(api, thread) for thread in after_copy] == [200] * len(after_copy)
    files_host.stop()

    # The switch: the hosts use the records database; a thread drafted before it is decided there.
    cli.env.update(SHARED_RECORDS)
    database_host = serve(cli)
    assert [_approve(database_host.client(token), thread) for thread in after_switch] == [200]
    database_host.stop()

    # Run again after the switch, it copies what the files gained since the first copy.
    again = cli.ok("records", "migrate", "--to", "postgres")
    assert "appended after the database's own entries" in again.stdout, again.stdout
    assert "Nothing changed" in cli.ok("records", "migrate", "--to", "postgres").stdout

    assert "The audit log verifies" in cli.ok("audit", "verify").stdout
    published = set()
    for thread in threads:  # every approval, whichever side of the copy and of the switch
        status = cli.ok("status", thread, "--json").json()
        assert status["status"] == "published", (thread, status["status"])
        actions = [
            (e["action"], e["actor"]) for e in cli.ok("audit", "list", "--thread", thread, "--json").json()
        ]
        assert actions.count(("approved", "bob")) == 1 and actions.count(("published", "bob")) == 1, actions
        shown = cli.ok("reports", "show", status["publication"]["key"], "--json").json()
        assert shown["thread_id"] == thread
        published.add(shown["key"])
    listed = {r["key"] for r in cli.ok("reports", "list", "--user", "ann", "--limit", "50", "--json").json()}
    assert published <= listed and len(published) == len(threads)


def test_a_report_erased_in_the_database_after_the_copy_is_not_copied_back(cli: Cli):
    keys = write_reports(cli.data_dir / "reports", 3)
    cli.ok("records", "migrate", "--to", "postgres")
    with psycopg.connect(cli.env["POSTGRES_URL"], autocommit=True) as conn:  # as forget does there
        conn.execute("DELETE FROM ma_archive_reports WHERE key = %s", (keys[1],))
    again = cli.ok("records", "migrate", "--to", "postgres")
    assert "1 reports erased there since the last copy, not copied back" in again.stdout, again.stdout
    assert sorted(stored(cli.env["POSTGRES_URL"])) == sorted([keys[0], keys[2]])
    # A report published into the directory after the copy (dated then) is still copied.
    now = datetime.now(UTC).isoformat(timespec="seconds")
    document = dict(report_document(3), created_at=now, approved_at=now)
    (cli.data_dir / "reports" / f"{document['key']}.json").write_bytes(render_document(document))
    third = cli.ok("records", "migrate", "--to", "postgres")
    assert document["key"] in stored(cli.env["POSTGRES_URL"]), third.stdout
