"""The audit log as an operator meets it a year later: a working day of decisions recorded through the
real CLI, `prune` and `forget` run over it, then `audit verify` against an edited byte, a deleted
entry, two swapped entries and a cut tail. Eight real processes appending at once are in
test_audit_port.py, on every backend."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

from tests.support.cli import Cli, unique_id

AUDIT = Path("audit") / "audit.jsonl"


def _working_day(cli: Cli) -> dict[str, str]:
    """Approvals, a rejection and a revision, for two users, and one thread pruned afterwards."""
    threads = {name: unique_id(name) for name in ("approved", "rejected", "revised", "forgotten")}
    cli.ok("analyze", "NVDA", "--thread-id", threads["approved"], "--user", "ann")
    cli.ok("approve", threads["approved"], "--user", "bob", "--note", "fine by me")
    cli.ok("analyze", "MSFT", "--thread-id", threads["rejected"], "--user", "ann")
    cli.ok("reject", threads["rejected"], "--user", "bob", "--reason", "figures are stale")
    cli.ok("analyze", "TSLA", "--thread-id", threads["revised"], "--user", "ann")
    cli.ok("revise", threads["revised"], "--user", "rev", "--feedback", "say more about the drawdown")
    cli.ok("approve", threads["revised"], "--user", "bob")
    cli.ok("analyze", "NFLX", "--thread-id", threads["forgotten"], "--user", "zelda")
    cli.ok("approve", threads["forgotten"], "--user", "bob", "--note", "zelda's own words")
    return threads


def _verify_fails(cli: Cli, data_dir: Path, why: str) -> str:
    refused = cli.fails("audit", "verify", extra_env={"MA_DATA_DIR": str(data_dir)})
    assert refused.returncode == 2 and why in refused.stderr, refused.stderr
    return refused.stderr


def test_the_log_survives_prune_and_forget_and_names_the_first_entry_that_was_tampered_with(cli: Cli):
    threads = _working_day(cli)
    entries = cli.ok("audit", "list", "--json").json()
    assert [e["action"] for e in entries] == [
        "approved", "published", "rejected", "revised", "approved", "published", "approved", "published",
    ]  # fmt: skip
    assert [e["seq"] for e in entries] == list(range(1, 9))
    assert cli.ok("audit", "verify").stdout.startswith("The audit log verifies: 8 entries")

    # prune removes the finished threads' checkpoints; the log keeps their decisions.
    cli.ok("prune", "--finished-before", "0s", "--yes")
    assert cli.fails("status", threads["approved"]).returncode == 2
    assert len(cli.ok("audit", "list", "--thread", threads["approved"], "--json").json()) == 2
    # forget erases zelda's personal content and records that it did; the chain still verifies.
    forgot = cli.ok("forget", "--user", "zelda", "--yes")
    assert "audit entries (personal content erased, chain kept): 2" in forgot.stdout
    log = (cli.data_dir / AUDIT).read_bytes()
    assert b"zelda" not in log and b"own words" not in log
    after = cli.ok("audit", "list", "--json").json()
    assert [e["erased"] for e in after if e.get("thread_id") == threads["forgotten"]] == [True, True]
    assert after[-1]["action"] == "erased" and after[-1]["erased_seqs"] == [7, 8]
    assert [e["actor"] for e in after[:2]] == ["bob", "bob"]  # other people's entries are untouched
    assert "9 entries, one chain (2 erased)" in cli.ok("audit", "verify").stdout

    exported = cli.ok("audit", "export", "--format", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert [r["seq"] for r in rows] == [str(n) for n in range(1, 10)] and rows[2][
        "note"
    ] == "figures are stale"
    assert cli.ok("audit", "export").stdout.encode() == log  # jsonl: the entries as stored

    def tampered(name: str, edit) -> Path:
        copy = cli.cwd / name
        shutil.copytree(cli.data_dir / "audit", copy / "audit")
        lines = (copy / AUDIT).read_bytes().splitlines(keepends=True)
        (copy / AUDIT).write_bytes(b"".join(edit(lines)))
        return copy

    def one_byte(lines: list[bytes]) -> list[bytes]:  # "figures are stale" -> "figures are stalf"
        lines[2] = lines[2].replace(b"stale", b"stalf")
        return lines

    def another_byte(lines: list[bytes]) -> list[bytes]:  # a field outside the personal content
        lines[4] = lines[4].replace(b'"door":"cli"', b'"door":"web"')
        return lines

    _verify_fails(cli, tampered("t1", one_byte), "entry 3 was changed (its personal content does not match)")
    _verify_fails(cli, tampered("t2", another_byte), "entry 5 was changed (its hash does not match)")
    _verify_fails(cli, tampered("t3", lambda ls: ls[:3] + ls[4:]), "entry 4 is missing")
    swapped = tampered("t4", lambda ls: [*ls[:3], ls[4], ls[3], *ls[5:]])
    _verify_fails(cli, swapped, "entry 4 is out of order (found entry 5")
    _verify_fails(cli, tampered("t5", lambda ls: ls[:-2]), "entries were removed from its end")

    def unrecorded_erasure(lines: list[bytes]) -> list[bytes]:
        entry = json.loads(lines[1])
        entry["personal"] = {"erased": True}
        lines[1] = json.dumps(entry, separators=(",", ":"), sort_keys=True).encode() + b"\n"
        return lines

    _verify_fails(cli, tampered("t6", unrecorded_erasure), "entry 2 was erased without an erasure entry")


def test_an_empty_or_unreadable_log_is_one_line(cli: Cli):
    assert "The audit log verifies: 0 entries" in cli.ok("audit", "verify").stdout
    assert cli.ok("audit", "list").stderr.strip() == "No audit entries."
    (cli.data_dir / "audit").mkdir(parents=True)
    (cli.data_dir / AUDIT).write_bytes(b"{not json\n")
    assert "audit entry on line 1 is not JSON" in cli.fails("audit", "list").stderr
    assert "entry 1 is not valid JSON" in cli.fails("audit", "verify").stderr
    wrong = cli.run("audit", "export", "--format", "xml")
    assert wrong.returncode == 2 and "xml" in wrong.stderr and "Traceback" not in wrong.stderr
