"""The approvers port on every records backend (the data directory's file, the PostgreSQL records
database), under several real processes adding and removing approvers at once: none lost, each
token still signs in, and one session secret, whoever made it first."""

from __future__ import annotations

from pathlib import Path

import pytest

from market_analyst.deps import open_approvers
from tests.support.crashkit import Harness
from tests.support.port_writers import RECORDS, add_and_remove_approvers, records_environ, records_settings

WRITERS = 6


@pytest.mark.parametrize("backend", RECORDS)
def test_approvers_added_and_removed_by_several_processes_at_once_are_all_kept(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, harness: Harness
):
    url = request.getfixturevalue("postgres_url") if backend == "postgres" else ""
    environ = records_environ(backend, tmp_path / "data", url)
    outputs = harness.call_together(add_and_remove_approvers, [(environ, f"w{n}") for n in range(WRITERS)])
    store = open_approvers(records_settings(environ))
    kept = {name: token for written in outputs for name, token in written["tokens"].items()}
    assert [a.name for a in store.list()] == sorted(kept) and len(kept) == WRITERS * 4
    assert all(store.authenticate(token).name == name for name, token in kept.items())
    assert len({written["secret"] for written in outputs}) == 1  # one secret, whoever made it first
    assert store.session_secret() == outputs[0]["secret"]
