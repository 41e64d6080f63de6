"""The audit port on every records backend (the data directory's log file, the PostgreSQL records
database): eight real processes appending at once keep one chain and lose nothing, and the CLI reads
and verifies what they wrote."""

from __future__ import annotations

import json

import pytest

from market_analyst.deps import open_audit
from tests.support.cli import Cli
from tests.support.crashkit import Harness
from tests.support.port_writers import RECORDS, append_events, records_environ, records_settings

WRITERS = 8
EACH = 25


@pytest.mark.parametrize("backend", RECORDS)
def test_eight_processes_appending_at_once_keep_one_chain_and_lose_nothing(
    backend: str, cli: Cli, harness: Harness
):
    environ = records_environ(backend, cli.data_dir, cli.env["POSTGRES_URL"])
    harness.call_together(append_events, [(environ, f"w{w}", EACH) for w in range(WRITERS)])
    log = open_audit(records_settings(environ))
    entries = log.entries()
    assert [e["seq"] for e in entries] == list(range(1, WRITERS * EACH + 1))
    assert sorted(e["event_id"] for e in entries) == sorted(
        f"w{w}:{n}" for w in range(WRITERS) for n in range(EACH)
    )
    for worker in range(WRITERS):  # each writer's entries in the order it wrote them, none mixed
        mine = [e for e in entries if e["thread_id"] == f"t-w{worker}"]
        assert [e["note"] for e in mine] == [f"note {n}" for n in range(EACH)]
        assert {e["actor"] for e in mine} == {f"user-w{worker}"}
    found = log.verify()
    assert found.entries == WRITERS * EACH and found.problem is None
    # The command line sees the same log.
    assert [e["seq"] for e in cli.ok("audit", "list", "--json", extra_env=environ).json()] == [
        e["seq"] for e in entries
    ]
    assert f"{WRITERS * EACH} entries, one chain" in cli.ok("audit", "verify", extra_env=environ).stdout
    if backend == "files":
        assert (cli.data_dir / "audit" / "audit.jsonl").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("backend", RECORDS)
def test_verify_while_four_processes_append_never_cries_tampering(backend: str, cli: Cli, harness: Harness):
    """`audit verify` reads the log and its head as one: run over and over (50 times at least) while
    four processes append, it never finds the log one entry ahead of its head or behind it, which it
    used to call "entries were removed from its end"."""
    from tests.support.port_writers import append_or_verify

    writers, each = 4, 40
    environ = records_environ(backend, cli.data_dir, cli.env["POSTGRES_URL"])
    environ |= {"MA_TEST_AUDIT_TOTAL": str(writers * each)}
    calls = [(environ, f"w{w}", each) for w in range(writers)] + [(environ, "verify", 50)]
    *_, verifier = harness.call_together(append_or_verify, calls)
    assert verifier["problems"] == [], verifier["problems"][:5]
    assert verifier["runs"] >= 50 and verifier["entries"] == writers * each, verifier
    assert open_audit(records_settings(environ)).verify().problem is None


def test_a_verify_that_finds_no_log_yet_is_not_misled_by_a_first_append_while_it_reads(tmp_path):
    """A verify that looks before any writer has made the log's directory holds no lock (there is no
    lock file yet to hold), so it must not go on to read the files: a first writer could put its
    entry and head between its read of the log (nothing) and of the head (entry 1), which read as
    an entry taken off the end. Here that writer comes at that very moment, every time."""
    from market_analyst.persistence.audit.files import AuditLog
    from market_analyst.ports import AuditEvent

    root = tmp_path / "audit"
    reader, writer = AuditLog(root), AuditLog(root)
    read_head = reader._head

    def head_after_a_first_append():
        writer.append(AuditEvent(event_id="e1", action="approved", at="2026-01-01T00:00:00+00:00"))
        return read_head()

    reader._head = head_after_a_first_append  # type: ignore[method-assign]
    found = reader.verify()
    assert found.problem is None and found.entries == 0
    reader._head = read_head  # type: ignore[method-assign]
    writer.append(AuditEvent(event_id="e1", action="approved", at="2026-01-01T00:00:00+00:00"))
    assert (reader.verify().entries, reader.verify().problem) == (1, None)


def test_an_append_killed_between_its_entry_and_the_head_verifies_and_the_next_one_completes_it(cli: Cli):
    """The file log writes an entry, then its head (audit.head): a decision killed between the two
    leaves a whole, chained entry that the head does not name yet (or no head at all, for the first
    entry). That is the append a kill cut, not a log altered: `audit verify` passes, the thread
    resumes to its end once, and the next entry moves the head. An entry taken off the end, and a
    head that is missing under more than one entry, are still found."""
    audit = cli.data_dir / "audit"
    between = "call:before:market_analyst.persistence.audit.files:AuditLog._write_head:1"

    def lines() -> list[bytes]:
        return (audit / "audit.jsonl").read_bytes().splitlines(keepends=True)

    def head() -> int | None:
        path = audit / "audit.head"
        return json.loads(path.read_text())["seq"] if path.exists() else None

    first = cli.ok("analyze", "NVDA", "--user", "ann", "--json").json()["thread_id"]
    cut = cli.harness.run(["approve", first, "--user", "bob"], cli.env, kill_point=between)
    assert cut.killed, (cut.returncode, cut.stderr)
    assert (len(lines()), head()) == (1, None)  # the first entry is there, no head yet
    assert "1 entries, one chain" in cli.ok("audit", "verify").stdout
    assert cli.ok("resume", first, "--json").json()["status"] == "published"
    assert "one chain" in cli.ok("audit", "verify").stdout

    second = cli.ok("analyze", "MSFT", "--user", "ann", "--json").json()["thread_id"]
    rejecting = ["reject", second, "--user", "bob", "--reason", "not now"]
    cut = cli.harness.run(rejecting, cli.env, kill_point=between)
    assert cut.killed, (cut.returncode, cut.stderr)
    assert head() == len(lines()) - 1  # the rejection is written, its head is not
    assert "one chain" in cli.ok("audit", "verify").stdout
    assert cli.ok("resume", second, "--json").json()["status"] == "rejected"
    rejections = [e for e in cli.ok("audit", "list", "--json").json() if e["thread_id"] == second]
    assert [e["action"] for e in rejections].count("rejected") == 1, rejections
    third = cli.ok("analyze", "TSLA", "--user", "ann", "--json").json()["thread_id"]
    cli.ok("reject", third, "--user", "bob", "--reason", "not this one either")
    assert head() == len(lines())  # the next entry moved the head to the end
    assert "one chain" in cli.ok("audit", "verify").stdout

    kept = lines()
    (audit / "audit.jsonl").write_bytes(b"".join(kept[:-1]))  # the last entry taken off
    refused = cli.fails("audit", "verify")
    assert refused.returncode == 2 and "entries were removed from its end" in refused.stderr, refused.stderr
    (audit / "audit.jsonl").write_bytes(b"".join(kept))
    (audit / "audit.head").unlink()  # no head under several entries
    refused = cli.fails("audit", "verify")
    assert refused.returncode == 2 and "audit.head" in refused.stderr, refused.stderr
