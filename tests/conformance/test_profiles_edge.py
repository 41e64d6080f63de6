"""The Qdrant Edge store under real processes: several commands at once on one store, `kill -9` in the
middle of `profile set`, and what the store looks like on disk (owner-only, its log on, an index on
`user_id`)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from market_analyst.errors import UserError
from market_analyst.persistence.profiles.store import ProfileStore
from market_analyst.state import HORIZONS, RISK_TOLERANCES, Profile
from tests.support import store_child
from tests.support.cli import Cli
from tests.support.crashkit import Harness

SESSION_PUT = "market_analyst.persistence.profiles.edge:EdgeSession._put"


def _run_together(cli: Cli, commands: list[list[str]]) -> list[tuple[int, str, str]]:
    """Start every command in a process of its own, release them at once, and wait for all."""
    assert cli.harness is not None
    outcomes = cli.harness.run_together([(args, cli.env) for args in commands], cwd=cli.cwd, at_once=True)
    return [(o.returncode, o.stdout, o.stderr) for o in outcomes]


def test_four_concurrent_sets_of_different_fields_all_succeed_and_all_fields_are_kept(cli: Cli):
    cli.ok("profile", "set", "--user", "ann", "--notes", "first")
    finished = _run_together(
        cli,
        [
            ["profile", "set", "--user", "ann", "--risk-tolerance", "aggressive"],
            ["profile", "set", "--user", "ann", "--horizon", "long"],
            ["profile", "set", "--user", "ann", "--sectors", "semiconductors,software"],
            ["profile", "set", "--user", "ann", "--notes", "second"],
        ],
    )
    assert [code for code, _, _ in finished] == [0, 0, 0, 0], [err for _, _, err in finished]
    profile = cli.ok("profile", "show", "--user", "ann", "--json").json()["profile"]
    assert (
        profile["risk_tolerance"],
        profile["horizon"],
        profile["preferred_sectors"],
        profile["notes"],
    ) == (
        "aggressive",
        "long",
        ["semiconductors", "software"],
        "second",
    )


def test_eight_concurrent_analyses_all_read_their_profiles(cli: Cli):
    users = [f"analyst-{i}" for i in range(8)]
    with ProfileStore(path=cli.data_dir / "profiles").session() as session:
        session.save_many(
            Profile(user_id=u, risk_tolerance=RISK_TOLERANCES[i % 3], notes=u)  # type: ignore[arg-type]
            for i, u in enumerate(users)
        )
    finished = _run_together(cli, [["analyze", "NVDA", "--user", u, "--json"] for u in users])
    for i, (code, out, err) in enumerate(finished):
        assert code == 0, err
        used = json.loads(out)["draft"]["profile"]
        assert used["source"] == "stored" and used["profile"]["user_id"] == users[i]
        assert (
            used["profile"]["risk_tolerance"] == RISK_TOLERANCES[i % 3]
            and used["profile"]["notes"] == users[i]
        )


def _version(k: int) -> list[str]:
    """`profile set` arguments that change every field to values that all name version `k`."""
    return [
        "--risk-tolerance", RISK_TOLERANCES[k % 3],
        "--horizon", HORIZONS[(k + 1) % 3],
        "--sectors", f"sector {k}",
        "--notes", f"version {k}",
    ]  # fmt: skip


def _stored_version(cli: Cli) -> int:
    """The version the stored profile holds; fails unless every field names the same one."""
    profile: dict[str, Any] = cli.ok("profile", "show", "--user", "ann", "--json").json()["profile"]
    k = int(profile["notes"].removeprefix("version "))
    assert profile["preferred_sectors"] == [f"sector {k}"], profile
    assert (profile["risk_tolerance"], profile["horizon"]) == (RISK_TOLERANCES[k % 3], HORIZONS[(k + 1) % 3])
    return k


@pytest.mark.parametrize(("when", "expected"), [("before", 0), ("after", 1)])
def test_kill_9_just_before_or_after_the_write_leaves_the_old_or_the_new_profile(
    cli: Cli, when: str, expected: int
):
    cli.ok("profile", "set", "--user", "ann", *_version(0))
    child = store_child.start(
        ["profile", "set", "--user", "ann", *_version(1)],
        env=cli.env,
        cwd=cli.cwd,
        kill=f"{when}:{SESSION_PUT}",
    )
    child.communicate(timeout=120)
    assert child.returncode == -9
    # Killed after the write, the shard was never flushed or closed: its log brings the write back.
    assert _stored_version(cli) == expected


def test_kill_9_at_random_moments_of_profile_set_never_leaves_a_mix(cli: Cli, harness: Harness):
    cli.ok("profile", "set", "--user", "ann", *_version(0))  # also starts the fork server
    # An uncrashed run, to time the kills against. Its first part is the fork, before a kill timer
    # can start, so the kills spread over its first half: the command's own work, to its last write.
    took = (
        harness.run(["profile", "set", "--user", "ann", *_version(0)], cli.env, cwd=cli.cwd).check().seconds
    )
    current, killed, attempts = 0, 0, 24
    for attempt in range(1, attempts + 1):
        delay = took / 2 * attempt / attempts
        outcome = harness.run(
            ["profile", "set", "--user", "ann", *_version(attempt)],
            cli.env,
            kill_point=f"at:{delay}",
            cwd=cli.cwd,
        )
        killed += outcome.killed
        stored = _stored_version(cli)  # readable, every field from one version
        assert stored in (current, attempt), (stored, current, attempt)
        current = stored
    assert killed >= 5, "too few of the commands were killed to mean anything"


ANNS_WORDS = "ann keeps zebra-7781 out of tobacco"
SHARD = "market_analyst.persistence.qdrant.edge_shard"


def _holding(folder: Path, text: str) -> list[Path]:
    """Every file under `folder` that holds `text`, read byte by byte."""
    return [p for p in folder.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_a_deleted_profile_leaves_none_of_its_words_on_disk(cli: Cli):
    cli.ok("profile", "set", "--user", "ann", "--notes", ANNS_WORDS)
    cli.ok("profile", "set", "--user", "bob", "--notes", "bob keeps this")
    assert _holding(cli.data_dir, ANNS_WORDS)  # the scan finds them while they are there
    cli.ok("profile", "delete", "--user", "ann")
    assert _holding(cli.data_dir, ANNS_WORDS) == []  # not in a segment, not in the write-ahead log
    assert cli.ok("profile", "show", "--user", "bob", "--json").json()["profile"]["notes"] == "bob keeps this"
    assert "No stored profile" in cli.ok("profile", "show", "--user", "ann").stdout


def test_deletions_and_sets_at_once_each_apply_and_no_deleted_words_remain(cli: Cli):
    """Two deletions (each a rewrite of the whole shard) and two sets, in four processes at once: every
    command succeeds, the sets are kept, and neither deleted profile leaves a byte behind."""
    for user in ("ann", "dan"):
        cli.ok("profile", "set", "--user", user, "--notes", f"{ANNS_WORDS} ({user})")
    finished = _run_together(
        cli,
        [
            ["profile", "delete", "--user", "ann"],
            ["profile", "set", "--user", "bob", "--notes", "bob keeps this"],
            ["profile", "delete", "--user", "dan"],
            ["profile", "set", "--user", "cy", "--notes", "cy keeps this"],
        ],
    )
    assert [code for code, _, _ in finished] == [0, 0, 0, 0], [err for _, _, err in finished]
    for user in ("bob", "cy"):
        notes = cli.ok("profile", "show", "--user", user, "--json").json()["profile"]["notes"]
        assert notes == f"{user} keeps this"
    for user in ("ann", "dan"):
        assert "No stored profile" in cli.ok("profile", "show", "--user", user).stdout
    assert _holding(cli.data_dir, ANNS_WORDS) == []


@pytest.mark.parametrize(
    ("kill", "deleted"),
    [
        (f"call:after:{SHARD}:build_beside", False),  # the new shard built beside, the store untouched
        (f"call:before:{SHARD}:mark_ready", False),  # the store moved aside, the new one not yet ready
        (f"call:after:{SHARD}:mark_ready", True),  # the new shard ready, no store in place
        (f"call:after:{SHARD}:put_in_place", True),  # the new store in place, the old one still aside
    ],
)
def test_a_deletion_killed_mid_rewrite_leaves_the_old_store_or_the_new_and_completes_again(
    cli: Cli, harness: Harness, kill: str, deleted: bool
):
    cli.ok("profile", "set", "--user", "ann", "--notes", ANNS_WORDS)
    cli.ok("profile", "set", "--user", "bob", "--notes", "bob keeps this")
    outcome = harness.run(["profile", "delete", "--user", "ann"], cli.env, kill_point=kill, cwd=cli.cwd)
    assert outcome.killed
    # The next command, a read, finds one whole store and settles what the kill left beside it.
    assert cli.ok("profile", "show", "--user", "bob", "--json").json()["profile"]["notes"] == "bob keeps this"
    shown = cli.ok("profile", "show", "--user", "ann").stdout
    assert ("No stored profile" in shown) is deleted
    assert sorted(p.name for p in cli.data_dir.iterdir() if p.name.startswith("profiles")) == ["profiles"]
    cli.ok("profile", "delete", "--user", "ann")  # again: it completes, or there is nothing left to delete
    assert _holding(cli.data_dir, ANNS_WORDS) == []
    assert cli.ok("profile", "show", "--user", "bob", "--json").json()["profile"]["notes"] == "bob keeps this"


def test_a_deletion_killed_at_twenty_random_moments_leaves_old_or_new_and_completes_again(
    cli: Cli, harness: Harness
):
    """`kill -9` at 20 moments spread over `profile delete` (the shard rewritten beside, swapped in):
    each time one whole store answers, ann's profile is there or gone but never half, bob's is as it
    was, and a second delete leaves none of ann's words and no copy beside the store."""
    import random

    cli.ok("profile", "set", "--user", "bob", "--notes", "bob keeps this")
    cli.ok("profile", "set", "--user", "ann", "--notes", ANNS_WORDS)
    took = harness.run(["profile", "delete", "--user", "ann"], cli.env, cwd=cli.cwd).check().seconds
    moments = random.Random(29).sample(range(1, 1000), 20)
    killed = 0
    for n, moment in enumerate(sorted(moments)):
        # The first, cold delete can take twice as long as the rest on a busy machine: every delete
        # that finishes before its kill shortens the scale, so the moments stay spread over a run.
        words = f"{ANNS_WORDS} {n}"
        cli.ok("profile", "set", "--user", "ann", "--notes", words)
        outcome = harness.run(
            ["profile", "delete", "--user", "ann"],
            cli.env,
            kill_point=f"at:{took * moment / 1000}",
            cwd=cli.cwd,
        )
        killed += outcome.killed
        if not outcome.killed:
            took = min(took, outcome.check().seconds)
        assert (
            cli.ok("profile", "show", "--user", "bob", "--json").json()["profile"]["notes"]
            == "bob keeps this"
        )
        shown = cli.ok("profile", "show", "--user", "ann", "--json").json()
        assert shown["source"] == "default" or shown["profile"]["notes"] == words, (moment, shown)
        cli.ok("profile", "delete", "--user", "ann")
        assert _holding(cli.data_dir, words) == [], moment
        assert sorted(p.name for p in cli.data_dir.iterdir() if p.name.startswith("profiles")) == ["profiles"]
    assert killed >= 10, killed


def test_the_store_is_owner_only_keeps_its_log_and_indexes_user_id(tmp_path: Path):
    previous = os.umask(0o022)
    try:
        store = ProfileStore(path=tmp_path / "data" / "profiles")
        store.update("ann", horizon="long")
        store.update("bob", horizon="short")
    finally:
        os.umask(previous)
    profiles = tmp_path / "data" / "profiles"
    assert stat.S_IMODE(profiles.stat().st_mode) == 0o700
    for path in profiles.rglob("*"):  # what Edge itself created, too
        assert stat.S_IMODE(path.lstat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700  # created here, so owner-only
    assert stat.S_IMODE((tmp_path / "data" / ".profiles.lock").stat().st_mode) == 0o600
    assert (profiles / "wal").is_dir()
    assert "wal_enabled" not in json.loads((profiles / "edge_config.json").read_text())  # the default: on

    from qdrant_edge import EdgeShard, PayloadSchemaType

    shard = EdgeShard.load(str(profiles))
    try:
        schema = shard.info().payload_schema
    finally:
        shard.close()
    assert set(schema) == {"user_id"} and schema["user_id"].data_type == PayloadSchemaType.Keyword


def test_a_damaged_store_is_one_line_naming_it(tmp_path: Path):
    store = ProfileStore(path=tmp_path / "profiles")
    store.update("ann", horizon="long")
    (tmp_path / "profiles" / "edge_config.json").write_text("not json")
    with pytest.raises(UserError) as error:
        store.get("ann")
    assert str(error.value).startswith(f"cannot open the Qdrant Edge store {tmp_path / 'profiles'}: ")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("engine", ["edge", "local"])
@pytest.mark.parametrize("where", ["is", "under"])
def test_a_data_directory_that_is_a_file_is_one_line_naming_it(tmp_path: Path, engine: str, where: str):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    data_dir = blocker if where == "is" else blocker / "data"
    store = ProfileStore(path=data_dir / "profiles", engine=engine)  # type: ignore[arg-type]
    with pytest.raises(UserError) as error:
        store.update("ann", horizon="long")
    assert str(blocker) in str(error.value) and "\n" not in str(error.value)
    assert blocker.read_text() == ""
