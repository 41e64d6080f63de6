"""The audit port on every records backend (the data directory's log file, the PostgreSQL records
database): eight real processes appending at once keep one chain and lose nothing, and the CLI reads
and verifies what they wrote."""

from __future__ import annotations

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
