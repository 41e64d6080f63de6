"""The PostgreSQL approval stores under several real processes writing at once: one audit chain with
nothing lost or doubled, approvers added and removed without losing one, sessions each their own and
a revocation never undone, every failed sign-in counted and turns that never overlap."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from market_analyst.deps import postgres_server
from market_analyst.persistence.approvers.postgres import PostgresApproverStore
from market_analyst.persistence.audit.postgres import PostgresAuditLog
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.persistence.sessions.postgres import PostgresSessionStore, PostgresSignInLimits
from market_analyst.settings import Settings
from tests.support import REPO

EACH = 25

PRELUDE = """
import json, sys, time
from pathlib import Path
from market_analyst.deps import postgres_server
from market_analyst.settings import Settings
worker, go = sys.argv[1], Path(sys.argv[2])
settings = Settings.load(environ={"MA_DATA_DIR": sys.argv[3], "POSTGRES_URL": sys.argv[4],
                                  "MA_RECORDS": "postgres"}, dotenv=None)
"""

APPENDER = """
from market_analyst.persistence.audit.postgres import PostgresAuditLog
from market_analyst.ports import AuditEvent
log = PostgresAuditLog(postgres_server(settings))
while not go.exists():
    time.sleep(0.005)
for n in range(%(each)d):
    log.append(AuditEvent(event_id=f"{worker}:{n}", action="approved", at="2026-01-01T00:00:00+00:00",
                          thread_id=f"t-{worker}", actor=f"user-{worker}", note=f"note {n}"))
    if n == 10:  # a repeat of an event already logged is kept once
        log.append(AuditEvent(event_id=f"{worker}:{n}", action="approved", at="2026-01-01T00:00:00+00:00"))
"""

APPROVER_WRITER = """
from market_analyst.persistence.approvers.postgres import PostgresApproverStore
store = PostgresApproverStore(postgres_server(settings))
while not go.exists():
    time.sleep(0.005)
tokens = {}
for n in range(8):
    name = f"{worker}-{n}"
    tokens[name] = store.add(name, "2026-01-01T00:00:00+00:00")
    if n %% 2:
        assert store.remove(name)
        del tokens[name]
secrets = {store.session_secret() for _ in range(3)}
print(json.dumps({"tokens": tokens, "secret": secrets.pop()}))
"""

SESSION_WRITER = """
from market_analyst.persistence.sessions.postgres import PostgresSessionStore
store = PostgresSessionStore(postgres_server(settings), idle=3600, lifetime=7200)
while not go.exists():
    time.sleep(0.005)
made, revoked = [], []
for n in range(%(each)d):
    _, record = store.create(name=worker, token_id="t-" + worker, client="10.0.0.%%d" %% n, now=time.time())
    made.append(record.key)
    store.touch(record.key, time.time())
    if n %% 3 == 0:
        assert store.revoke(record.key)
        assert store.touch(record.key, time.time()) is None  # a use after revocation revives nothing
        revoked.append(record.key)
print(json.dumps({"made": made, "revoked": revoked}))
"""

LIMIT_WRITER = """
from market_analyst.persistence.sessions.postgres import PostgresSignInLimits
limits = PostgresSignInLimits(postgres_server(settings), limit=10**6, window=3600)
counter = Path(sys.argv[3]) / "counter"
while not go.exists():
    time.sleep(0.005)
for n in range(%(each)d):
    limits.failed("shared", time.time())
    limits.failed("own:" + worker, time.time())
    with limits.turn("counter"):  # read, pause, write: only one process at a time may do this
        value = int(counter.read_text()) if counter.exists() else 0
        time.sleep(0.001)
        counter.write_text(str(value + 1))
"""


def _server(postgres_url: str, data_dir: Path) -> PostgresServer:
    environ = {"MA_DATA_DIR": str(data_dir), "POSTGRES_URL": postgres_url, "MA_RECORDS": "postgres"}
    return postgres_server(Settings.load(environ=environ, dotenv=None))


def _run_at_once(tmp_path: Path, postgres_url: str, script: str, writers: int) -> list[str]:
    go = tmp_path / "go"
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                PRELUDE + script % {"each": EACH},
                f"w{n}",
                str(go),
                str(data),
                postgres_url,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(writers)
    ]
    time.sleep(2.0)  # every child has imported and waits at the line
    go.touch()
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        outputs.append(out)
    return outputs


def test_eight_processes_appending_at_once_keep_one_chain_and_lose_nothing(tmp_path: Path, postgres_url: str):
    _run_at_once(tmp_path, postgres_url, APPENDER, 8)
    log = PostgresAuditLog(_server(postgres_url, tmp_path / "data"))
    entries = log.entries()
    assert [e["seq"] for e in entries] == list(range(1, 8 * EACH + 1))
    assert sorted(e["event_id"] for e in entries) == sorted(
        f"w{w}:{n}" for w in range(8) for n in range(EACH)
    )
    for worker in range(8):  # each writer's entries in the order it wrote them, none mixed
        mine = [e for e in entries if e["thread_id"] == f"t-w{worker}"]
        assert [e["note"] for e in mine] == [f"note {n}" for n in range(EACH)]
        assert {e["actor"] for e in mine} == {f"user-w{worker}"}
    found = log.verify()
    assert found.entries == 8 * EACH and found.problem is None


def test_approvers_added_and_removed_by_several_processes_at_once_are_all_kept(
    tmp_path: Path, postgres_url: str
):
    outputs = [json.loads(out) for out in _run_at_once(tmp_path, postgres_url, APPROVER_WRITER, 6)]
    store = PostgresApproverStore(_server(postgres_url, tmp_path / "data"))
    kept = {name: token for written in outputs for name, token in written["tokens"].items()}
    assert [a.name for a in store.list()] == sorted(kept) and len(kept) == 6 * 4
    assert all(store.authenticate(token).name == name for name, token in kept.items())
    assert len({written["secret"] for written in outputs}) == 1  # one secret, whoever made it first
    assert store.session_secret() == outputs[0]["secret"]


def test_sessions_written_by_several_processes_at_once_are_all_there(tmp_path: Path, postgres_url: str):
    outputs = [json.loads(out) for out in _run_at_once(tmp_path, postgres_url, SESSION_WRITER, 6)]
    store = PostgresSessionStore(_server(postgres_url, tmp_path / "data"), idle=3600, lifetime=7200)
    now = time.time()
    for n, written in enumerate(outputs):
        live = store.sessions(f"w{n}", now)
        assert {r.key for r in live} == set(written["made"]) - set(written["revoked"])
        assert len(set(written["made"])) == EACH
        assert all(r.name == f"w{n}" and r.token_id == f"t-w{n}" for r in live)
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT count(*) FROM ma_sessions").fetchone()
    assert rows == (sum(len(w["made"]) - len(w["revoked"]) for w in outputs),)
    assert store.revoke_all("w0") == EACH - len(outputs[0]["revoked"]) and store.sessions("w0", now) == []


def test_failures_counted_by_several_processes_at_once_are_all_counted(tmp_path: Path, postgres_url: str):
    _run_at_once(tmp_path, postgres_url, LIMIT_WRITER, 6)
    limits = PostgresSignInLimits(_server(postgres_url, tmp_path / "data"), limit=10**6, window=3600)
    now = time.time()
    assert limits.failures("shared", now) == 6 * EACH
    assert all(limits.failures(f"own:w{n}", now) == EACH for n in range(6))
    assert (tmp_path / "data" / "counter").read_text() == str(6 * EACH)  # turns never overlapped
