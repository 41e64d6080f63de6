"""Upgrading from `qdrant-client` local mode: a folder an earlier version wrote (the tests write it with
`qdrant-client` itself) becomes a Qdrant Edge store on first use with every point in it, even when
the migrating command is killed at any step; `MA_PROFILE_STORE=local` keeps the old engine."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from market_analyst.errors import UserError
from market_analyst.persistence.profiles.store import ProfileStore
from tests.support import store_child
from tests.support.cli import Cli
from tests.support.profiles import count_points, hold_store, profile_payloads, write_local_mode_folder

SETUP = "market_analyst.persistence.profiles.edge_setup"


def _local_folder(cli: Cli, users: int) -> list[str]:
    """A local-mode store in the CLI's data directory: `users` profiles, one unreadable payload and
    one point planted under ann's ID that names mallory. Returns the users with a valid profile."""
    names = [f"user-{i:04d}" for i in range(users)]
    write_local_mode_folder(
        cli.data_dir / "profiles",
        [
            *profile_payloads(names),
            ("broken", {"user_id": "broken", "risk_tolerance": "reckless"}),
            ("ann", {"user_id": "mallory", "notes": "planted"}),
        ],
    )
    return names


def _assert_every_profile_moved(cli: Cli, names: list[str]) -> None:
    profiles = cli.data_dir / "profiles"
    backup = cli.data_dir / "profiles.local-mode-backup"
    # Owner-only, checked before anything below opens the shard without the application.
    for folder in (profiles, backup):
        for path in [folder, *folder.rglob("*")]:
            assert stat.S_IMODE(path.lstat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    store = ProfileStore(path=profiles)
    with store.session() as session:
        for name in names:
            got = session.get(name)
            assert got is not None and got.notes == f"notes of {name}", name
        assert session.get("ann") is None  # the planted point still names mallory, so it is not ann's
    with pytest.raises(UserError, match="stored profile of user 'broken' is unreadable"):
        store.get("broken")  # copied as stored, not judged: it is the user's to fix
    assert count_points("edge", profiles) == len(names) + 2
    assert count_points("local", backup) == len(names) + 2  # the old folder is kept, whole
    leftovers = {p.name for p in cli.data_dir.iterdir()} - {"profiles", "profiles.local-mode-backup"}
    assert not {name for name in leftovers if name.startswith("profiles")}, leftovers


def test_a_local_mode_store_is_migrated_on_first_use_with_every_profile(cli: Cli):
    names = _local_folder(cli, 300)
    shown = cli.ok("profile", "show", "--user", "user-0123", "--json").json()
    assert shown["source"] == "stored" and shown["profile"]["notes"] == "notes of user-0123"
    _assert_every_profile_moved(cli, names)
    # Later commands use the Edge store as it is: a change lands there, the backup stays as it was.
    cli.ok("profile", "set", "--user", "user-0123", "--horizon", "long")
    assert cli.ok("profile", "show", "--user", "user-0123", "--json").json()["profile"]["horizon"] == "long"
    assert count_points("local", cli.data_dir / "profiles.local-mode-backup") == len(names) + 2


def test_profile_migrate_moves_the_folder_and_says_where_the_old_one_is(cli: Cli):
    names = _local_folder(cli, 20)
    done = cli.ok("profile", "migrate", "--json").json()
    assert done == {
        "store": str(cli.data_dir / "profiles"),
        "moved": len(names) + 2,
        "backup": str(cli.data_dir / "profiles.local-mode-backup"),
    }
    _assert_every_profile_moved(cli, names)
    again = cli.ok("profile", "migrate").stdout
    assert "Nothing to migrate" in again and str(cli.data_dir / "profiles") in again


@pytest.mark.parametrize(
    "kill",
    [
        "after:market_analyst.persistence.profiles.edge:_upsert:1",  # the new shard half written
        f"before:{SETUP}:_mark_ready",
        f"after:{SETUP}:_mark_ready",  # the new shard complete, the old folder still in place
        f"after:{SETUP}:_retire",  # the old folder moved aside, the new shard not yet in place
        f"after:{SETUP}:_install",
    ],
)
def test_a_migration_killed_at_any_step_is_finished_by_the_next_command(cli: Cli, kill: str):
    names = _local_folder(cli, 1500)  # two batches: the first kill lands between them
    child = store_child.start(["profile", "show", "--user", "user-0001"], env=cli.env, cwd=cli.cwd, kill=kill)
    child.communicate(timeout=120)
    assert child.returncode == -9, f"the child was not killed at {kill}"

    profiles = cli.data_dir / "profiles"
    ready = cli.data_dir / "profiles.edge-ready"
    # Whatever the moment: the old folder is whole where it was, or the complete new store is in place
    # or waiting beside it.
    if (profiles / "meta.json").exists():
        assert count_points("local", profiles) == len(names) + 2
    else:
        assert count_points("edge", ready if ready.exists() else profiles) == len(names) + 2

    assert cli.ok("profile", "show", "--user", "user-0001", "--json").json()["source"] == "stored"
    _assert_every_profile_moved(cli, names)


def test_local_mode_stays_selectable_and_refuses_an_edge_store(cli: Cli):
    local = {"MA_PROFILE_STORE": "local"}
    cli.ok("profile", "set", "--user", "ann", "--horizon", "long", extra_env=local)
    assert (cli.data_dir / "profiles" / "meta.json").exists()  # written by local mode, not migrated
    assert "long horizon" in cli.ok("profile", "show", "--user", "ann", extra_env=local).stdout

    cli.ok("profile", "show", "--user", "ann")  # the default engine migrates it
    result = cli.fails("profile", "show", "--user", "ann", extra_env=local)
    assert result.returncode == 2 and "is a Qdrant Edge store" in result.stderr
    assert "MA_PROFILE_STORE=edge" in result.stderr


def test_a_migration_waits_for_a_local_mode_process_then_says_so(cli: Cli):
    names = _local_folder(cli, 10)
    holder = hold_store(cli.harness, "local", cli.data_dir / "profiles", 60)
    try:
        result = cli.fails("profile", "show", "--user", "user-0001")
        assert result.returncode == 2 and "in use by another process" in result.stderr
        assert (cli.data_dir / "profiles" / "meta.json").exists()  # nothing moved under the holder
    finally:
        holder.kill()
        holder.wait()
    cli.ok("profile", "show", "--user", "user-0001")
    _assert_every_profile_moved(cli, names)


def test_a_folder_of_something_else_is_refused_and_left_alone(cli: Cli):
    profiles = cli.data_dir / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "notes.txt").write_text("mine")
    result = cli.fails("profile", "set", "--user", "ann", "--horizon", "long")
    assert (
        result.returncode == 2
        and "holds neither a Qdrant Edge store nor a Qdrant local-mode" in result.stderr
    )
    assert [p.name for p in profiles.iterdir()] == ["notes.txt"]


def test_migrate_names_what_it_cannot_migrate(tmp_path: Path):
    for store, needle in (
        (ProfileStore(path=tmp_path / "p", engine="local"), "MA_PROFILE_STORE=local"),
        (ProfileStore(url="http://127.0.0.1:9"), "the Qdrant server at http://127.0.0.1:9"),
    ):
        with pytest.raises(UserError, match=needle):
            store.migrate()
    nothing = ProfileStore(path=tmp_path / "p").migrate()
    assert nothing.backup is None and nothing.moved == 0 and not (tmp_path / "p").exists()
