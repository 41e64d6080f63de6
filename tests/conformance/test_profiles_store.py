"""The profile store on both embedded engines, each a real store in a real directory (a Qdrant Edge
shard, and a `qdrant-client` local-mode folder): exact-ID reads that never return another user's
payload, replacing saves, partial updates, bad values, unreadable profiles, and a store held by a
real second process."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from market_analyst.deps import open_profiles
from market_analyst.errors import ServiceUnavailable, UserError
from market_analyst.persistence.profiles.store import ProfileStore
from market_analyst.settings import Settings
from market_analyst.state import RISK_TOLERANCES, Profile
from tests.support.cli import clean_environ
from tests.support.crashkit import Harness
from tests.support.profiles import ENGINES, count_points, hold_store, plant

FIXED = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=ENGINES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ProfileStore:
    return ProfileStore(
        path=tmp_path / "profiles", engine=request.param, now=lambda: FIXED, lock_wait_seconds=0.5
    )


def _path(store: ProfileStore) -> Path:
    assert store.path is not None
    return store.path


def test_reads_by_exact_user_id_among_1000_profiles_never_return_another_users_payload(store: ProfileStore):
    users = [f"user-{i:04d}" for i in range(1000)]
    with store.session() as session:
        session.save_many(
            Profile(user_id=u, risk_tolerance=RISK_TOLERANCES[i % 3], notes=f"notes of {u}")  # type: ignore[arg-type]
            for i, u in enumerate(users)
        )
        for i, user in enumerate(users):
            got = session.get(user)
            assert got is not None and got.user_id == user and got.notes == f"notes of {user}"
            assert got.risk_tolerance == RISK_TOLERANCES[i % 3]
        # Near misses are other users: case, whitespace and prefixes never match.
        for near in ("User-0001", "user-0001.", "user-000", "user-00010"):
            assert session.get(near) is None

    # A point under ann's ID whose payload names mallory: ann has no profile, and mallory's data
    # never leaks to ann. Mallory's own profile (under her own ID) is unaffected.
    store.save(Profile(user_id="mallory", risk_tolerance="aggressive", notes="mallory's own"))
    planted = Profile(user_id="mallory", risk_tolerance="conservative", notes="planted").model_dump()
    plant(store.engine, _path(store), "ann", planted)
    assert store.get("ann") is None
    assert store.delete("ann") is False  # refusing to read it, the store also refuses to delete it as ann's
    mallory = store.get("mallory")
    assert mallory is not None and mallory.notes == "mallory's own"

    # The same with a payload that differs from the requested ID only in case.
    plant(store.engine, _path(store), "bob", {**planted, "user_id": "Bob"})
    assert store.get("bob") is None
    # Saving ann's own profile reclaims her point.
    store.save(Profile(user_id="ann", horizon="long"))
    ann = store.get("ann")
    assert ann is not None and ann.user_id == "ann" and ann.notes == "" and ann.horizon == "long"
    assert store.get("user-0500") is not None and store.get("user-0500").user_id == "user-0500"  # type: ignore[union-attr]


def test_saving_again_replaces_and_stamps_the_injected_clock(store: ProfileStore):
    first = store.save(Profile(user_id="ann@example.com", risk_tolerance="conservative"))
    assert first.updated_at == "2025-03-01T12:00:00+00:00"
    later = ProfileStore(path=_path(store), engine=store.engine, now=lambda: datetime(2025, 4, 2, tzinfo=UTC))
    later.save(Profile(user_id="ann@example.com", risk_tolerance="aggressive"))
    got = store.get("ann@example.com")
    assert got is not None and got.risk_tolerance == "aggressive"
    assert got.updated_at == "2025-04-02T00:00:00+00:00"
    assert count_points(store.engine, _path(store)) == 1  # one point per user: the save replaced it


def test_update_changes_only_the_given_fields(store: ProfileStore):
    store.update("ann", risk_tolerance="aggressive", preferred_sectors=["semiconductors"], notes="n")
    store.update("ann", horizon="short")
    got = store.get("ann")
    assert got is not None
    assert (got.risk_tolerance, got.horizon, got.preferred_sectors, got.notes) == (
        "aggressive",
        "short",
        ["semiconductors"],
        "n",
    )


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"risk_tolerance": "yolo"}, "risk_tolerance: Input should be 'conservative', 'moderate' or"),
        ({"horizon": "forever"}, "horizon: Input should be 'short', 'medium' or 'long'"),
        ({"notes": "x" * 501}, "notes: at most 500 characters"),
        ({"preferred_sectors": ["x" * 41]}, "preferred_sectors"),
        ({"preferred_sectors": [f"s{i}" for i in range(21)]}, "at most 20"),
    ],
)
def test_invalid_values_store_nothing(store: ProfileStore, changes: dict[str, object], needle: str):
    store.update("ann", risk_tolerance="conservative")
    before = store.get("ann")
    with pytest.raises(UserError) as error:
        store.update("ann", **changes)
    assert needle in str(error.value) and "\n" not in str(error.value)
    assert store.get("ann") == before


@pytest.mark.parametrize("user_id", ["", "a" * 65, "a" * 500, "ann smith", "../ann", "-ann", "ann\n"])
def test_invalid_user_ids_are_refused(store: ProfileStore, user_id: str):
    for call in (
        lambda: store.get(user_id),
        lambda: store.update(user_id, horizon="long"),
        lambda: store.delete(user_id),
    ):
        with pytest.raises(UserError, match="invalid user ID"):
            call()


def test_an_unreadable_stored_profile_is_one_line_that_says_how_to_fix_it(store: ProfileStore):
    store.save(Profile(user_id="ann", horizon="long"))
    plant(
        store.engine, _path(store), "ann", {"user_id": "ann", "risk_tolerance": "reckless", "horizon": "long"}
    )
    for call in (lambda: store.get("ann"), lambda: store.update("ann", notes="x")):
        with pytest.raises(UserError) as error:
            call()
        message = str(error.value)
        assert "\n" not in message and "stored profile of user 'ann' is unreadable" in message
        assert "risk_tolerance" in message and "market-analyst profile delete --user ann" in message
    # The fix it names works: delete removes the unreadable point, then a new profile can be set.
    assert store.delete("ann") is True
    assert store.get("ann") is None
    assert store.update("ann", risk_tolerance="aggressive").risk_tolerance == "aggressive"


def test_reading_a_store_that_was_never_written_creates_nothing(tmp_path: Path):
    for engine in ENGINES:
        store = ProfileStore(path=tmp_path / "never", engine=engine)  # type: ignore[arg-type]
        assert store.get("ann") is None and store.delete("ann") is False
        assert not (tmp_path / "never").exists()
    assert list(tmp_path.iterdir()) == []


def test_the_settings_choose_the_embedded_engine_or_a_server(tmp_path: Path):
    def store_for(**environ: str) -> ProfileStore:
        return open_profiles(Settings.load(environ={"MA_DATA_DIR": str(tmp_path), **environ}, dotenv=None))

    edge = store_for()
    assert edge.path == tmp_path / "profiles" and edge.url is None and edge.engine == "edge"
    assert store_for(MA_PROFILE_STORE="Local").engine == "local"
    server = store_for(QDRANT_URL="http://127.0.0.1:9", MA_PROFILE_STORE="local")
    assert server.url == "http://127.0.0.1:9" and server.path is None
    with pytest.raises(UserError, match="MA_PROFILE_STORE='sqlite'"):
        store_for(MA_PROFILE_STORE="sqlite")


def test_an_unreachable_server_is_one_clear_line():
    store = ProfileStore(url="http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(
        ServiceUnavailable, match=r"the Qdrant server at http://127.0.0.1:9 did not answer"
    ) as error:
        store.get("ann")
    assert "\n" not in str(error.value)


def test_a_store_held_by_another_process_is_waited_for_then_refused(store: ProfileStore, harness: Harness):
    store.save(Profile(user_id="ann"))
    holder = hold_store(harness, store.engine, _path(store), 30)
    try:
        started = time.monotonic()
        with pytest.raises(UserError, match="in use by another process") as error:
            store.get("ann")
        assert time.monotonic() - started >= 0.5  # it waited before giving up
        assert "\n" not in str(error.value) and "QDRANT_URL" in str(error.value)
    finally:
        holder.kill()
        holder.wait()
    assert store.get("ann") is not None  # the holder is gone (killed): the store is free again


def test_a_store_released_within_the_wait_is_used(store: ProfileStore, harness: Harness):
    store.save(Profile(user_id="ann", horizon="long"))
    patient = ProfileStore(path=_path(store), engine=store.engine, lock_wait_seconds=30)
    holder = hold_store(harness, store.engine, _path(store), 1.0)
    try:
        got = patient.get("ann")  # retries with backoff until the holder closes the store
        assert got is not None and got.horizon == "long"
    finally:
        holder.wait(timeout=30)
    assert holder.said() == ["held", "released"]


def test_commands_that_do_not_touch_profiles_import_no_store_library():
    code = (
        "import sys, market_analyst.cli, market_analyst.workflow, market_analyst.graph, market_analyst.deps; "
        "from market_analyst.settings import Settings; from market_analyst.deps import build_deps; "
        "build_deps(Settings.load(environ={}, dotenv=None)); "
        "print(sorted(m for m in ('qdrant_client', 'qdrant_edge') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_environ())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
