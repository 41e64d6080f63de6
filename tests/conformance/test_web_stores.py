"""The session and sign-in-failure stores under several real processes writing at once: nothing
lost, nothing mixed, and a revocation never undone by a use racing it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from market_analyst.persistence.sessions.files import SessionStore, SignInLimits
from tests.support import REPO

WRITERS = 6
EACH = 25

SESSION_WRITER = """
import json, sys, time
from pathlib import Path
from market_analyst.persistence.sessions.files import SessionStore
root, name, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
store = SessionStore(root, idle=3600, lifetime=7200)
while not go.exists():
    time.sleep(0.005)
made, revoked = [], []
for n in range(%(each)d):
    _, record = store.create(name=name, token_id="t-" + name, client="10.0.0.%%d" %% n, now=time.time())
    made.append(record.key)
    store.touch(record.key, time.time())
    if n %% 3 == 0:
        assert store.revoke(record.key)
        assert store.touch(record.key, time.time()) is None  # a use after revocation revives nothing
        revoked.append(record.key)
print(json.dumps({"made": made, "revoked": revoked}))
"""

LIMIT_WRITER = """
import sys, time
from pathlib import Path
from market_analyst.persistence.sessions.files import SignInLimits
root, name, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
limits = SignInLimits(root, limit=10**6, window=3600)
while not go.exists():
    time.sleep(0.005)
for n in range(%(each)d):
    limits.failed("shared", time.time())
    limits.failed("own:" + name, time.time())
    with limits.turn("counter"):  # read, pause, write: only one process at a time may do this
        path = root / "counter"
        value = int(path.read_text()) if path.exists() else 0
        time.sleep(0.001)
        path.write_text(str(value + 1))
"""


def _run_at_once(tmp_path: Path, script: str) -> list[str]:
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script % {"each": EACH}, str(tmp_path / "data"), f"w{n}", str(go)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(WRITERS)
    ]
    time.sleep(1.5)  # every child has imported and waits at the line
    go.touch()
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        outputs.append(out)
    return outputs


def test_sessions_written_by_several_processes_at_once_are_all_there_and_each_its_own(tmp_path: Path):
    outputs = [json.loads(out) for out in _run_at_once(tmp_path, SESSION_WRITER)]
    store = SessionStore(tmp_path / "data", idle=3600, lifetime=7200)
    now = time.time()
    for n, written in enumerate(outputs):
        name = f"w{n}"
        live = store.sessions(name, now)
        assert {r.key for r in live} == set(written["made"]) - set(written["revoked"])
        assert len(written["made"]) == EACH and len(set(written["made"])) == EACH
        assert all(r.name == name and r.token_id == f"t-{name}" for r in live)
        assert sorted(r.client for r in live) == sorted(f"10.0.0.{i}" for i in range(EACH) if i % 3 != 0)
    files = list((tmp_path / "data" / "sessions").glob("*.json"))
    assert len(files) == sum(len(w["made"]) - len(w["revoked"]) for w in outputs)
    assert not list((tmp_path / "data" / "sessions").glob(".*.tmp"))
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)

    assert store.revoke_all("w0") == EACH - len(outputs[0]["revoked"])
    assert store.sessions("w0", now) == [] and len(store.sessions("w1", now)) > 0


def test_failures_counted_by_several_processes_at_once_are_all_counted(tmp_path: Path):
    _run_at_once(tmp_path, LIMIT_WRITER)
    limits = SignInLimits(tmp_path / "data", limit=10**6, window=3600)
    now = time.time()
    assert limits.failures("shared", now) == WRITERS * EACH
    assert all(limits.failures(f"own:w{n}", now) == EACH for n in range(WRITERS))
    assert (tmp_path / "data" / "counter").read_text() == str(WRITERS * EACH)  # turns never overlapped
    assert (tmp_path / "data" / "sign-in-failures.json").stat().st_mode & 0o777 == 0o600


def test_old_failures_age_out_and_sessions_time_out(tmp_path: Path):
    limits = SignInLimits(tmp_path, limit=2, window=60)
    limits.failed("k", 1000.0)
    limits.failed("k", 1030.0)
    assert limits.retry_after("k", 1031.0) == 29.0
    assert limits.retry_after("k", 1060.5) is None  # the first failure is a minute old
    store = SessionStore(tmp_path, idle=10, lifetime=30)
    session_id, record = store.create(name="a", token_id="t", client="c", now=1000.0)
    assert store.find(session_id, 1009.0) == record and store.find(session_id, 1010.0) is None
    store.touch(record.key, 1009.0)
    assert store.find(session_id, 1018.0) is not None and store.find(session_id, 1030.0) is None
    assert store.find("not-a-session", 1000.0) is None and not store.revoke("../../etc/passwd")
