"""Forced-crash recovery on both backends and in every durability mode (see tests/support/crash_matrix.py).

Every case kills a real process with SIGKILL, recovers with the real CLI in fresh processes, and
compares the archive with an uncrashed run of the same inputs, byte for byte.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import clean_environ
from tests.support.crash_matrix import (
    FIXED_CLOCK,
    KILL_POINTS,
    LEASE_TTL_SECONDS,
    MODES,
    Reference,
    expected_loss,
    record,
    reference,
    reference_run,
    run_case,
)
from tests.support.crashkit import Harness
from tests.support.services import new_database

RANDOM_KILLS = int(os.environ.get("CRASH_RANDOM_KILLS", "50"))  # `make crash-soak` raises it
RANDOM_SEED = {"postgres": 20250214, "redis": 20201120}


@pytest.fixture(scope="session")
def crash_databases(postgres_server: str) -> Iterator[dict[str, str]]:
    """Two databases per worker: one for the uncrashed reference runs, one for the crashed runs."""
    yield {role: new_database(postgres_server, prefix=f"crash_{role}_") for role in ("reference", "crash")}


@pytest.fixture(scope="session")
def uncrashed(
    harness: Harness, crash_databases: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Reference:
    """One uncrashed run (PostgreSQL, `sync`) per worker, which every case is compared with."""
    env = clean_environ() | {
        "SOURCE_DATE_EPOCH": FIXED_CLOCK,
        "MA_DATA_DIR": str(tmp_path_factory.mktemp("uncrashed") / "data"),
        "POSTGRES_URL": crash_databases["reference"],
    }
    return reference(harness, env, f"crash-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def envs(
    request: pytest.FixtureRequest, tmp_path: Path, crash_databases: dict[str, str]
) -> dict[str, dict[str, str]]:
    """The reference run's environment (PostgreSQL, `sync`) and the crashed run's, on `backend`."""
    backend = request.param
    base = clean_environ() | {"SOURCE_DATE_EPOCH": FIXED_CLOCK}
    reference = base | {
        "MA_DATA_DIR": str(tmp_path / "reference"),
        "POSTGRES_URL": crash_databases["reference"],
    }
    crashed = base | {"MA_DATA_DIR": str(tmp_path / "crashed")}
    if backend == "redis":
        crashed |= {
            "MA_CHECKPOINTER": "redis",
            "REDIS_URL": request.getfixturevalue("own_redis"),
            "MA_LEASE_TTL_SECONDS": LEASE_TTL_SECONDS,
        }
    else:
        crashed |= {"POSTGRES_URL": crash_databases["crash"]}
    return {"reference": reference, "crashed": crashed, "backend": backend}


def _assert_recovered(report, allowed=None) -> None:
    assert report.killed, f"{report.kill_point}: the child was not killed"
    assert report.documents == 1, f"{report.kill_point}: {report.documents} documents in the archive"
    assert report.identical, f"{report.kill_point}: the document differs from the uncrashed run's"
    assert report.approval_kept, f"{report.kill_point}: recovery asked for a second approval"
    if allowed is not None:
        assert allowed.admits(report), f"{report.kill_point}: lost more than allowed: {report}"


@pytest.mark.parametrize("envs", ["postgres", "redis"], indirect=True)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kill_point", KILL_POINTS)
def test_kill_point(harness: Harness, uncrashed: Reference, envs: dict, mode: str, kill_point: str):
    thread_id = f"crash-{uuid.uuid4().hex[:12]}"
    expected = uncrashed.for_thread(thread_id)
    report = run_case(harness, envs["crashed"] | {"MA_DURABILITY": mode}, thread_id, kill_point, expected)
    record(report, envs["backend"], mode)
    _assert_recovered(report, expected_loss(mode, kill_point))


@pytest.mark.parametrize("envs", ["postgres", "redis"], indirect=True)
@pytest.mark.parametrize("index", range(RANDOM_KILLS))
def test_random_kill_in_sync_mode(
    harness: Harness, uncrashed: Reference, envs: dict, index: int, request: pytest.FixtureRequest
):
    """Kill at a seeded fraction of the time an uncrashed run took (so under any load the kill lands
    inside the run); a run that still finished first is tried again at half the delay, timed by the
    run it missed."""
    backend = request.node.callspec.params["envs"]
    fraction = random.Random(RANDOM_SEED[backend] + index).random()
    seconds = uncrashed.seconds
    for attempt in range(4):
        thread_id = f"random-{uuid.uuid4().hex[:12]}"
        # Each attempt gets a data directory of its own, so its archive holds only its own report.
        crashed = envs["crashed"] | {"MA_DATA_DIR": f"{envs['crashed']['MA_DATA_DIR']}-{thread_id}"}
        expected = uncrashed.for_thread(thread_id)
        kill_point = f"at:{fraction * 0.9 * seconds / 2**attempt:.3f}"
        report = run_case(harness, crashed | {"MA_DURABILITY": "sync"}, thread_id, kill_point, expected)
        if report.killed:
            break
        seconds = report.finished_in
    record(report, backend, "sync")
    if not report.killed:
        pytest.fail(f"no kill landed: every run finished before its timer ({kill_point})")
    _assert_recovered(report)
    assert len(report.reran) <= 1, f"{kill_point}: sync mode re-ran {report.reran}"


@pytest.mark.parametrize("envs", ["postgres"], indirect=True)
def test_one_uncrashed_run_stands_for_every_thread(harness: Harness, uncrashed: Reference, envs: dict):
    """The cases compare with `uncrashed.for_thread(...)`: it is what a real run of that thread writes."""
    thread_id = f"crash-{uuid.uuid4().hex[:12]}"
    document, _ = reference_run(harness, envs["reference"], thread_id)
    assert uncrashed.for_thread(thread_id) == document
    assert uncrashed.for_thread(uncrashed.thread_id) == uncrashed.document
