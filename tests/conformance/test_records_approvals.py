"""Approvers, sessions, sign-in failures and the audit log in the PostgreSQL records database
(`MA_RECORDS=postgres`): the same behaviour as their file twins, the copy from the files that
`records migrate --to postgres` is built on, and the commands over them."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest

from market_analyst.deps import postgres_server
from market_analyst.errors import ServiceUnavailable, UserError
from market_analyst.persistence.approvers.files import ApproverStore
from market_analyst.persistence.approvers.postgres import PostgresApproverStore
from market_analyst.persistence.audit.files import AuditLog
from market_analyst.persistence.audit.postgres import PostgresAuditLog
from market_analyst.persistence.migrate import AuditCopy, copy_approvers, copy_audit
from market_analyst.persistence.sessions.postgres import PostgresSessionStore, PostgresSignInLimits
from market_analyst.ports import AuditEvent
from market_analyst.settings import Settings
from tests.support import SHARED_RECORDS
from tests.support.cli import Cli, unique_id


def records_settings(postgres_url: str, data_dir: Path) -> Settings:
    environ = {"MA_DATA_DIR": str(data_dir), "POSTGRES_URL": postgres_url, **SHARED_RECORDS}
    return Settings.load(environ=environ, dotenv=None)


def _event(n: int, actor: str = "bob") -> AuditEvent:
    return AuditEvent(
        event_id=f"e:{n}", action="approved", at="2026-01-01T00:00:00+00:00", thread_id=f"t{n % 2}",
        actor=actor, requester="ann", note=f"note {n}",
    )  # fmt: skip


def test_the_file_stores_copy_into_postgres_once_and_their_tokens_keep_working(
    tmp_path: Path, postgres_url: str
):
    files = ApproverStore(tmp_path / "data")
    kim = files.add("kim", "2026-01-01T00:00:00+00:00")
    lee = files.add("lee", "2026-01-02T00:00:00+00:00", role="reviewer")
    secret = files.session_secret()
    log = AuditLog(tmp_path / "data" / "audit")
    for n in range(5):
        log.append(_event(n, actor="zed" if n == 3 else "bob"))
    log.erase_user("zed", "2026-01-03T00:00:00+00:00")  # an erased entry and its erasure copy as they are

    approvers = PostgresApproverStore(postgres_server(records_settings(postgres_url, tmp_path / "data")))
    audit = PostgresAuditLog(postgres_server(records_settings(postgres_url, tmp_path / "data")))
    assert copy_approvers(files, approvers) == (3, 0)  # two approvers and the session secret
    assert copy_audit(log, audit) == AuditCopy(6, 0)
    assert approvers.authenticate(kim).name == "kim" and approvers.authenticate(lee).role == "reviewer"
    assert approvers.session_secret() == secret
    assert [a.name for a in approvers.list()] == ["kim", "lee"]
    assert audit.export("jsonl") == log.export("jsonl") and audit.export("csv") == log.export("csv")
    assert audit.verify().entries == 6 and audit.verify().problem is None and audit.verify().erased == 1

    # Run again: nothing new, nothing doubled; then one more entry on the file side is carried over.
    assert copy_approvers(files, approvers) == (0, 3)
    assert copy_audit(log, audit) == AuditCopy(0, 6)
    log.append(_event(9))
    assert copy_audit(log, audit) == AuditCopy(1, 6) and audit.entries()[-1]["event_id"] == "e:9"

    # A different value on the database side is refused, and nothing of that copy is written.
    files.remove("lee")
    files.add("lee", "2026-01-04T00:00:00+00:00")
    files.add("max", "2026-01-04T00:00:00+00:00")
    with pytest.raises(UserError, match="'lee' is in the records database already with another token"):
        copy_approvers(files, approvers)
    assert [a.name for a in approvers.list()] == ["kim", "lee"] and approvers.authenticate(lee) is not None
    other = ApproverStore(tmp_path / "other")
    other.session_secret()
    with pytest.raises(UserError, match="session secret of its own"):
        copy_approvers(other, approvers)
    assert approvers.session_secret() == secret

    # An audit log that is not the one the database holds is refused at its first entry.
    stranger = AuditLog(tmp_path / "other" / "audit")
    stranger.append(_event(100))
    with pytest.raises(UserError, match="does not follow the records database's last entry"):
        copy_audit(stranger, audit)
    assert audit.verify().entries == 7


def _copied_three(tmp_path: Path, postgres_url: str) -> tuple[AuditLog, PostgresAuditLog]:
    """A file log of three entries (the second zed's, the others bob's), copied whole into a database."""
    log = AuditLog(tmp_path / "data" / "audit")
    for n in range(3):
        log.append(_event(n, actor="zed" if n == 1 else "bob"))
    audit = PostgresAuditLog(postgres_server(records_settings(postgres_url, tmp_path / "data")))
    assert copy_audit(log, audit) == AuditCopy(3, 0)
    return log, audit


def test_a_copy_after_the_switch_carries_what_the_file_log_gained_and_names_what_it_cannot(
    tmp_path: Path, postgres_url: str
):
    log, audit = _copied_three(tmp_path, postgres_url)
    # Hosts switched: the database gains entries of its own; a host still on the files adds two.
    audit.append(_event(10))
    log.append(_event(11))
    log.append(_event(12))
    assert copy_audit(log, audit) == AuditCopy(0, 3, carried=[4, 5])
    entries = audit.entries()
    assert [e["event_id"] for e in entries] == ["e:0", "e:1", "e:2", "e:10", "e:11", "e:12"]
    assert entries[4]["note"] == "note 11" and entries[4]["seq"] == 5
    assert entries[4]["copied_from"] == {"seq": 4, "hash": log.stored()[3]["hash"]}
    assert audit.verify().problem is None and audit.verify().entries == 6
    assert copy_audit(log, audit) == AuditCopy(0, 5)  # run again: nothing doubled
    # An erasure made in the database since leaves its entries erased there: nothing comes back.
    assert audit.erase_user("zed", "2026-01-05T00:00:00+00:00") == 1
    assert copy_audit(log, audit) == AuditCopy(0, 5)
    assert not any(e["actor"] == "zed" for e in audit.entries())
    # One made in the file log after the copy cannot be carried as it is: named, the rest copied.
    log.append(_event(13, actor="yan"))
    log.erase_user("bob", "2026-01-06T00:00:00+00:00")
    found = copy_audit(log, audit)
    assert (found.copied, found.present, found.carried, len(found.left)) == (0, 1, [6], 5), found
    assert "erased in the data directory after the copy" in found.left[0]
    assert "records an erasure made in the data directory after the copy" in found.left[-1]
    assert audit.verify().problem is None
    # The same forget on the database: then the file's erasure is present there too, and nothing is
    # named again.
    audit.erase_user("bob", "2026-01-07T00:00:00+00:00")
    assert copy_audit(log, audit) == AuditCopy(0, 7)
    assert audit.verify().problem is None


def test_an_erasure_made_on_the_files_after_the_copy_is_never_copied_as_if_the_database_had_made_it(
    tmp_path: Path, postgres_url: str
):
    log, audit = _copied_three(tmp_path, postgres_url)
    log.erase_user("zed", "2026-01-03T00:00:00+00:00")  # its erasure entry would follow the database's chain
    found = copy_audit(log, audit)
    assert (found.copied, found.present, found.carried, len(found.left)) == (0, 2, [], 2), found
    assert [e["action"] for e in audit.entries()] == ["approved"] * 3  # no erasure claimed there
    assert [e["actor"] for e in audit.entries()] == ["bob", "zed", "bob"]  # and zed's words still there
    audit.erase_user("zed", "2026-01-04T00:00:00+00:00")
    assert copy_audit(log, audit) == AuditCopy(0, 4)  # done there too: nothing left to name
    assert audit.verify().problem is None


def test_an_append_waits_its_turn_while_a_copy_holds_the_file_log(tmp_path: Path, postgres_url: str):
    log = AuditLog(tmp_path / "data" / "audit")
    log.append(_event(1))
    appender = threading.Thread(target=AuditLog(log.root).append, args=(_event(2),))  # another opener
    with log.holding():
        appender.start()
        appender.join(0.5)
        assert appender.is_alive()  # waiting on the lock, not failed
        audit = PostgresAuditLog(postgres_server(records_settings(postgres_url, tmp_path / "data")))
        assert [e["event_id"] for e in log.stored()] == ["e:1"] and log.verify().problem is None
    appender.join(10)
    assert not appender.is_alive() and [e["event_id"] for e in log.stored()] == ["e:1", "e:2"]
    assert copy_audit(log, audit) == AuditCopy(2, 0)


def test_a_damaged_file_log_is_not_copied(tmp_path: Path, postgres_url: str):
    log = AuditLog(tmp_path / "audit")
    log.append(_event(1))
    log.append(_event(2))
    log.path.write_bytes(log.path.read_bytes().replace(b"note 1", b"note X"))
    target = PostgresAuditLog(postgres_server(records_settings(postgres_url, tmp_path / "data")))
    with pytest.raises(UserError, match="does not verify .entry 1 was changed"):
        copy_audit(log, target)
    assert target.verify().entries == 0


def test_postgres_stores_behave_as_their_file_twins(tmp_path: Path, postgres_url: str):
    settings = records_settings(postgres_url, tmp_path / "data")
    approvers = PostgresApproverStore(postgres_server(settings))
    token = approvers.add("kim", "2026-01-01T00:00:00+00:00")
    with pytest.raises(UserError, match="approver 'kim' exists"):
        approvers.add("kim", "2026-01-01T00:00:00+00:00")
    token_id, secret = token.split(".", 1)
    assert approvers.recognised(token) is None  # not verified by this process yet
    assert approvers.authenticate(token).name == "kim" and approvers.recognised(token).name == "kim"
    assert approvers.authenticate(f"{token_id}.{secret[:-1]}x") is None and approvers.knows_token_id(token_id)
    assert approvers.set_role("kim", "reviewer") and approvers.role_of("kim") == "reviewer"
    other_process = PostgresApproverStore(postgres_server(settings))
    assert other_process.remove("kim") and not other_process.remove("kim")
    assert approvers.recognised(token) is None and approvers.authenticate(token) is None  # removed elsewhere
    assert approvers.current("kim", token_id) is None and approvers.role_of("kim") is None

    sessions = PostgresSessionStore(postgres_server(settings), idle=10, lifetime=30)
    session_id, record = sessions.create(name="a", token_id="t", client="c" * 100, now=1000.0)
    assert len(record.client) == 64 and not (tmp_path / "data" / "sessions").exists()
    assert sessions.find(session_id, 1009.0) == record and sessions.find(session_id, 1010.0) is None
    assert sessions.touch(record.key, 1009.0).last_seen == 1009.0
    assert sessions.touch(record.key, 1005.0).last_seen == 1009.0  # a late use never moves it back
    assert sessions.find(session_id, 1018.0) is not None and sessions.find(session_id, 1030.0) is None
    assert sessions.touch(record.key, 1030.0) is None
    assert sessions.sessions("a", 1010.0) == [sessions.find(session_id, 1010.0)]
    assert sessions.revoke(record.key) and not sessions.revoke(record.key) and not sessions.revoke("../x")
    assert sessions.touch(record.key, 1011.0) is None  # a use after revocation revives nothing
    for n in range(3):
        sessions.create(name="b", token_id="t", client=f"10.0.0.{n}", now=2000.0 + n)
    assert [s.client for s in sessions.sessions("b", 2005.0)] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]
    assert sessions.revoke_all("b") == 3 and sessions.sessions("b", 2005.0) == []

    limits = PostgresSignInLimits(postgres_server(settings), limit=2, window=60)
    limits.failed("k", 1000.0)
    limits.failed("k", 1030.0)
    assert limits.failures("k", 1031.0) == 2 and limits.retry_after("k", 1031.0) == 29.0
    assert limits.retry_after("k", 1060.5) is None  # the first failure is a minute old
    limits.failed("j", 1200.0)  # counting a failure clears those older than the window
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM ma_sign_in_failures").fetchone() == (1,)


def test_audit_commands_forget_and_tampering_on_postgres(cli: Cli, postgres_url: str):
    env = SHARED_RECORDS
    thread, other = unique_id("kept"), unique_id("forgotten")
    cli.ok("analyze", "NVDA", "--thread-id", thread, "--user", "ann", extra_env=env)
    cli.ok("approve", thread, "--user", "bob", "--note", "fine by me", extra_env=env)
    cli.ok("analyze", "NFLX", "--thread-id", other, "--user", "zelda", extra_env=env)
    cli.ok("reject", other, "--user", "bob", "--reason", "zelda's own words", extra_env=env)
    assert not (cli.data_dir / "audit").exists()  # nothing went to the files
    entries = cli.ok("audit", "list", "--json", extra_env=env).json()
    assert [(e["seq"], e["action"]) for e in entries] == [(1, "approved"), (2, "published"), (3, "rejected")]
    assert len(cli.ok("audit", "list", "--thread", thread, "--json", extra_env=env).json()) == 2
    assert "3 entries, one chain" in cli.ok("audit", "verify", extra_env=env).stdout
    forgot = cli.ok("forget", "--user", "zelda", "--yes", extra_env=env)
    assert "audit entries (personal content erased, chain kept): 1" in forgot.stdout
    exported = cli.ok("audit", "export", extra_env=env).stdout
    assert "zelda" not in exported and json.loads(exported.splitlines()[-1])["erased_seqs"] == [3]
    assert "4 entries, one chain (1 erased)" in cli.ok("audit", "verify", extra_env=env).stdout
    assert "fine by me" in cli.ok("audit", "export", "--format", "csv", extra_env=env).stdout

    def refused(sql: str, why: str) -> None:
        """Make one edit, see `verify` name it, and put the tables back as they were."""
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            rows = conn.execute("SELECT seq, event_id, thread_id, body FROM ma_audit_entries").fetchall()
            head = conn.execute("SELECT id, seq, hash FROM ma_audit_head").fetchall()
            conn.execute(sql)
            bad = cli.fails("audit", "verify", extra_env=env)
            assert bad.returncode == 2 and why in bad.stderr, bad.stderr
            with conn.transaction():
                conn.execute("DELETE FROM ma_audit_entries")
                conn.execute("DELETE FROM ma_audit_head")
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO ma_audit_entries VALUES (%s, %s, %s, %s)", rows)
                    cur.executemany("INSERT INTO ma_audit_head VALUES (%s, %s, %s)", head)

    edit = "UPDATE ma_audit_entries SET body = replace(body, 'fine by me', 'fine by mf') WHERE seq = 1"
    refused(edit, "entry 1 was changed (its personal content does not match)")
    refused("UPDATE ma_audit_entries SET body = replace(body, '\"door\":\"cli\"', '\"door\":\"web\"') "
            "WHERE seq = 2", "entry 2 was changed (its hash does not match)")  # fmt: skip
    refused("DELETE FROM ma_audit_entries WHERE seq = 2", "entry 2 is missing")
    refused("DELETE FROM ma_audit_entries WHERE seq = 4", "entries were removed from its end")
    refused("DELETE FROM ma_audit_head", "the log's head row (ma_audit_head) is missing")
    assert "4 entries, one chain" in cli.ok("audit", "verify", extra_env=env).stdout


def test_an_unreachable_records_database_is_one_line(cli: Cli):
    env = {"MA_RECORDS": "postgres", "POSTGRES_URL": "postgresql://nobody@127.0.0.1:1/none"}
    for args in (("approvers", "list"), ("audit", "verify"), ("approvers", "add", "kim")):
        down = cli.fails(*args, extra_env=env)
        assert down.returncode == 69 and "cannot connect to PostgreSQL at" in down.stderr, down.stderr


def test_a_records_database_that_drops_the_connection_or_loses_the_head_row_is_one_clear_error(
    tmp_path: Path, postgres_url: str
):
    settings = records_settings(postgres_url, tmp_path / "data")
    limits = PostgresSignInLimits(postgres_server(settings), limit=5, window=60)
    limits.failures("k", 1000.0)  # the tables exist
    with pytest.raises(ServiceUnavailable, match="stopped answering.*run the command again"):
        with limits.turn("k"), psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
    assert limits.failures("k", 1000.0) == 0  # the next operation connects again

    log = PostgresAuditLog(postgres_server(settings))
    log.append(_event(1))
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("DELETE FROM ma_audit_head")
    with pytest.raises(
        UserError, match="cannot be appended to: the log's head row .ma_audit_head. is missing"
    ):
        log.append(_event(2))
    assert [e["event_id"] for e in log.entries()] == ["e:1"]
