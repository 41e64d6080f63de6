"""The web inbox's session and sign-in-failure ports on every records backend (the data directory's
files, the PostgreSQL records database), under several real processes writing at once: nothing lost,
nothing mixed, a revocation never undone by a use racing it, every failure counted and turns that
never overlap."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from market_analyst.deps import open_sessions, open_sign_in_limits
from tests.support.crashkit import Harness
from tests.support.port_writers import (
    RECORDS,
    count_failures,
    create_and_revoke_sessions,
    records_environ,
    records_settings,
)

WRITERS = 6
EACH = 25


@pytest.fixture(params=RECORDS)
def environ(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The settings of this test's records, on each backend."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""
    return records_environ(request.param, tmp_path / "data", url)


def test_sessions_written_by_several_processes_at_once_are_all_there_and_each_its_own(
    environ: dict[str, str], harness: Harness
):
    outputs = harness.call_together(
        create_and_revoke_sessions, [(environ, f"w{n}", EACH) for n in range(WRITERS)]
    )
    store = open_sessions(records_settings(environ))
    now = time.time()
    for n, written in enumerate(outputs):
        name = f"w{n}"
        live = store.sessions(name, now)
        assert {r.key for r in live} == set(written["made"]) - set(written["revoked"])
        assert len(written["made"]) == EACH and len(set(written["made"])) == EACH
        assert all(r.name == name and r.token_id == f"t-{name}" for r in live)
        assert sorted(r.client for r in live) == sorted(f"10.0.0.{i}" for i in range(EACH) if i % 3 != 0)
    stored = sum(len(w["made"]) - len(w["revoked"]) for w in outputs)
    if "POSTGRES_URL" in environ:
        with psycopg.connect(environ["POSTGRES_URL"]) as conn:
            assert conn.execute("SELECT count(*) FROM ma_sessions").fetchone() == (stored,)
    else:
        sessions = Path(environ["MA_DATA_DIR"]) / "sessions"
        files = list(sessions.glob("*.json"))
        assert len(files) == stored
        assert not list(sessions.glob(".*.tmp"))
        assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)

    assert store.revoke_all("w0") == EACH - len(outputs[0]["revoked"])
    assert store.sessions("w0", now) == [] and len(store.sessions("w1", now)) > 0


def test_failures_counted_by_several_processes_at_once_are_all_counted(
    environ: dict[str, str], harness: Harness
):
    counter = Path(environ["MA_DATA_DIR"]).parent / "counter"
    harness.call_together(count_failures, [(environ, f"w{n}", EACH, str(counter)) for n in range(WRITERS)])
    limits = open_sign_in_limits(records_settings(environ), limit=10**6, window=3600)
    now = time.time()
    assert limits.failures("shared", now) == WRITERS * EACH
    assert all(limits.failures(f"own:w{n}", now) == EACH for n in range(WRITERS))
    assert counter.read_text() == str(WRITERS * EACH)  # turns never overlapped
    if "POSTGRES_URL" not in environ:
        assert (Path(environ["MA_DATA_DIR"]) / "sign-in-failures.json").stat().st_mode & 0o777 == 0o600


def test_old_failures_age_out_and_sessions_time_out(environ: dict[str, str]):
    settings = records_settings(environ | {"MA_SESSION_IDLE": "10s", "MA_SESSION_MAX": "30s"})
    limits = open_sign_in_limits(settings, limit=2, window=60)
    limits.failed("k", 1000.0)
    limits.failed("k", 1030.0)
    assert limits.retry_after("k", 1031.0) == 29.0
    assert limits.retry_after("k", 1060.5) is None  # the first failure is a minute old
    store = open_sessions(settings)
    session_id, record = store.create(name="a", token_id="t", client="c", now=1000.0)
    assert store.find(session_id, 1009.0) == record and store.find(session_id, 1010.0) is None
    store.touch(record.key, 1009.0)
    assert store.find(session_id, 1018.0) is not None and store.find(session_id, 1030.0) is None
    assert store.find("not-a-session", 1000.0) is None and not store.revoke("../../etc/passwd")
