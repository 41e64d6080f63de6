"""The profile store on a real Qdrant local store in a real directory: exact-ID reads that never return
another user's payload, replacing saves, partial updates, and a folder held by a real second process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from market_analyst.errors import UserError
from market_analyst.persistence.profiles import COLLECTION, ProfileStore, point_id_for
from market_analyst.settings import Settings
from market_analyst.state import RISK_TOLERANCES, Profile
from tests.support.cli import clean_environ

FIXED = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> ProfileStore:
    return ProfileStore(path=tmp_path / "profiles", now=lambda: FIXED, lock_wait_seconds=0.5)


def _plant(path: Path, under_user: str, payload: dict[str, object]) -> None:
    """Write a point straight through Qdrant, as another writer (or a corruption) might."""
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(path))
    try:
        point = models.PointStruct(id=point_id_for(under_user), vector={}, payload=payload)
        client.upsert(COLLECTION, points=[point])
    finally:
        client.close()


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
    assert store.path is not None
    _plant(store.path, "ann", planted)
    assert store.get("ann") is None
    assert store.delete("ann") is False  # refusing to read it, the store also refuses to delete it as ann's
    mallory = store.get("mallory")
    assert mallory is not None and mallory.notes == "mallory's own"

    # The same with a payload that differs from the requested ID only in case.
    _plant(store.path, "bob", {**planted, "user_id": "Bob"})
    assert store.get("bob") is None
    # Saving ann's own profile reclaims her point.
    store.save(Profile(user_id="ann", horizon="long"))
    ann = store.get("ann")
    assert ann is not None and ann.user_id == "ann" and ann.notes == "" and ann.horizon == "long"
    assert store.get("user-0500") is not None and store.get("user-0500").user_id == "user-0500"  # type: ignore[union-attr]


def test_saving_again_replaces_and_stamps_the_injected_clock(store: ProfileStore, tmp_path: Path):
    first = store.save(Profile(user_id="ann@example.com", risk_tolerance="conservative"))
    assert first.updated_at == "2025-03-01T12:00:00+00:00"
    later = ProfileStore(path=tmp_path / "profiles", now=lambda: datetime(2025, 4, 2, tzinfo=UTC))
    later.save(Profile(user_id="ann@example.com", risk_tolerance="aggressive"))
    got = store.get("ann@example.com")
    assert got is not None and got.risk_tolerance == "aggressive"
    assert got.updated_at == "2025-04-02T00:00:00+00:00"
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(tmp_path / "profiles"))
    try:
        assert client.count(COLLECTION).count == 1  # one point per user: the save replaced it
    finally:
        client.close()


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


def test_reading_a_store_that_was_never_written_creates_nothing(tmp_path: Path):
    store = ProfileStore(path=tmp_path / "never")
    assert store.get("ann") is None and store.delete("ann") is False
    assert not (tmp_path / "never").exists()


def test_from_settings_chooses_local_mode_or_a_server(tmp_path: Path):
    local = ProfileStore.from_settings(Settings.load(environ={"MA_DATA_DIR": str(tmp_path)}, dotenv=None))
    assert local.path == tmp_path / "profiles" and local.url is None
    server = ProfileStore.from_settings(
        Settings.load(environ={"MA_DATA_DIR": str(tmp_path), "QDRANT_URL": "http://127.0.0.1:9"}, dotenv=None)
    )
    assert server.url == "http://127.0.0.1:9" and server.path is None


def test_an_unreachable_server_is_one_clear_line():
    store = ProfileStore(url="http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(UserError, match=r"the Qdrant server at http://127.0.0.1:9 failed") as error:
        store.get("ann")
    assert "\n" not in str(error.value)


HOLDER = textwrap.dedent(
    """
    import sys, time
    from qdrant_client import QdrantClient
    client = QdrantClient(path=sys.argv[1])
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    client.close()
    print("released", flush=True)
    """
)


def hold_folder(path: Path, seconds: float) -> subprocess.Popen[str]:
    """A real second process that opens the local store and keeps it for `seconds`."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env=clean_environ(),
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_folder_held_by_another_process_is_waited_for_then_refused(store: ProfileStore):
    store.save(Profile(user_id="ann"))
    assert store.path is not None
    holder = hold_folder(store.path, 30)
    try:
        started = time.monotonic()
        with pytest.raises(UserError, match="in use by another process") as error:
            store.get("ann")
        assert time.monotonic() - started >= 0.5  # it waited before giving up
        assert "\n" not in str(error.value) and "QDRANT_URL" in str(error.value)
    finally:
        holder.kill()
        holder.wait()
    assert store.get("ann") is not None  # the holder is gone: the folder is free again


def test_a_folder_released_within_the_wait_is_used(tmp_path: Path):
    store = ProfileStore(path=tmp_path / "profiles", lock_wait_seconds=30)
    store.save(Profile(user_id="ann", horizon="long"))
    holder = hold_folder(tmp_path / "profiles", 1.0)
    try:
        got = store.get("ann")  # blocks until the holder closes its client
        assert got is not None and got.horizon == "long"
    finally:
        holder.wait(timeout=30)
    assert holder.stdout is not None and holder.stdout.read().strip() == "released"


def test_commands_that_do_not_touch_profiles_do_not_import_qdrant():
    code = (
        "import sys, market_analyst.cli, market_analyst.workflow, market_analyst.graph, market_analyst.deps; "
        "from market_analyst.settings import Settings; from market_analyst.deps import build_deps; "
        "build_deps(Settings.load(environ={}, dotenv=None)); "
        "print('qdrant_client' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_environ())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
