"""Threads left by released versions are decided by this one: approve, reject, revise and resume.

Each directory under `tests/fixtures/upgrade/` holds what one released version stored on PostgreSQL
and on Redis (made from that version's own code by `scripts/make-upgrade-fixtures.py`): a thread at
the gate, one revised once, one forked at the gate, and one killed with SIGKILL before the gate. Every
test here runs once per fixture version and backend: it loads the fixture into a fresh database (or
a fresh Redis server), then runs the current CLI on it.

`0.1.0` is the release; `early-ec1d6c9` a commit from before drafts were dated, carried a chart, or
had a thread index or `fork`. A new released version's fixtures are registered by making them (the
directory is found by itself).
The clock is frozen an hour after the fixtures were made (`SOURCE_DATE_EPOCH`), so a draft's age does
not depend on the day the suite runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from market_analyst.state import SCHEMA_VERSION, AnalystState
from market_analyst.workflow.upgrade import STATE_KEYS, Migration, registry_problems
from tests.support import REPO
from tests.support.backends import BACKENDS
from tests.support.cli import Cli, clean_environ
from tests.support.crashkit import Harness
from tests.support.services import RedisServer

FIXTURES = REPO / "tests" / "fixtures" / "upgrade"
FIXTURE_VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if (p / "fixture.json").is_file())
CASES = [
    pytest.param((version, backend), id=f"{version}-{backend}")
    for version in FIXTURE_VERSIONS
    for backend in BACKENDS
]


def _made(version: str) -> set[str]:
    """The kinds of thread a fixture holds (an early version had no fork)."""
    return set(json.loads((FIXTURES / version / "fixture.json").read_text())["backends"]["postgres"])


FORKED_CASES = [case for case in CASES if "forked" in _made(case.values[0][0])]


@dataclass
class Upgraded:
    """A fixture loaded into a fresh store, and the current CLI pointed at it."""

    cli: Cli
    manifest: dict[str, Any]
    backend: str
    store_url: str

    def thread(self, kind: str) -> str:
        return str(self.manifest["threads"][kind])

    def stood(self, kind: str) -> dict[str, Any]:
        """Where the thread stood under the version that wrote it."""
        return dict(self.manifest["backends"][self.backend][kind])

    def at(self, delay: timedelta) -> dict[str, str]:
        """The clock `delay` after the fixture was made, for one command."""
        made = datetime.fromisoformat(self.manifest["made_at"].replace("Z", "+00:00"))
        return {"SOURCE_DATE_EPOCH": str(int((made + delay).timestamp()))}


def load_postgres(uri: str, fixture: Path) -> None:
    """The old version's tables (made by its own statements) and every row it stored."""
    with psycopg.connect(uri, autocommit=True) as conn:
        for statement in (fixture / "schema.sql").read_text().split(";\n\n"):
            if statement.strip():
                conn.execute(statement)
        for rows in sorted(fixture.glob("*.jsonl")):
            table = rows.stem
            for line in rows.read_text().splitlines():
                conn.execute(
                    f"INSERT INTO {table} SELECT * FROM json_populate_record(NULL::{table}, %s::json)",
                    (line,),
                )


def load_redis(url: str, fixture: Path) -> None:
    """Every key the old version stored, into a server whose search indexes exist (as they did)."""
    import redis
    from langgraph.checkpoint.redis import RedisSaver

    from market_analyst.persistence.checkpoints.thread_index import RedisThreadIndex

    client = redis.Redis.from_url(url)
    client.flushall()
    with RedisSaver.from_conn_string(url) as saver:
        saver.setup()
    RedisThreadIndex(client).setup()
    for line in (fixture / "keys.jsonl").read_text().splitlines():
        entry = json.loads(line)
        key, kind, value = entry["key"], entry["type"], entry["value"]
        if kind == "ReJSON-RL":
            client.execute_command("JSON.SET", key, "$", json.dumps(value))
        elif kind == "hash":
            client.hset(key, mapping=value)
        elif kind == "string":
            client.set(key, value)
        elif kind == "zset":
            client.zadd(key, {member: score for member, score in value})
        elif kind == "set":
            client.sadd(key, *value)
        elif kind == "list":
            client.rpush(key, *value)
        else:
            raise AssertionError(f"fixture key {key} has type {kind}")
        if entry.get("pttl"):
            client.pexpire(key, entry["pttl"])
    client.close()


@pytest.fixture(scope="module")
def upgrade_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis Stack server of this module's own: fixtures carry fixed thread IDs and the index's
    markers, so each is loaded into an emptied server rather than the session's shared one."""
    server = RedisServer(tmp_path_factory.mktemp("upgrade-redis")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(params=CASES)
def upgraded(request: pytest.FixtureRequest, tmp_path: Path, harness: Harness) -> Upgraded:
    version, backend = request.param
    root = FIXTURES / version
    manifest = json.loads((root / "fixture.json").read_text())
    env = clean_environ() | {"MA_DATA_DIR": str(tmp_path / "data")}
    if backend == "postgres":
        url = request.getfixturevalue("postgres_url")
        load_postgres(url, root / "postgres")
        env |= {"POSTGRES_URL": url}
    else:
        url = request.getfixturevalue("upgrade_redis")
        load_redis(url, root / "redis")
        env |= {"MA_CHECKPOINTER": "redis", "REDIS_URL": url}
    upgraded = Upgraded(Cli(env=env, cwd=tmp_path, harness=harness), manifest, backend, url)
    upgraded.cli.env |= upgraded.at(timedelta(hours=1))
    return upgraded


def status(up: Upgraded, kind: str) -> dict[str, Any]:
    return dict(up.cli.ok("status", up.thread(kind), "--json").json())


def test_threads_stand_where_the_old_version_left_them(upgraded: Upgraded) -> None:
    for kind in upgraded.manifest["backends"][upgraded.backend]:
        now = status(upgraded, kind)
        stood = upgraded.stood(kind)
        assert (now["status"], now["next"]) == (stood["status"], stood["next"]), kind
        assert ((now.get("draft") or {}).get("revision")) == stood["revision"], kind
    listed = {row["thread_id"] for row in upgraded.cli.ok("threads", "--json").json()}
    assert listed == {upgraded.thread(kind) for kind in upgraded.manifest["backends"][upgraded.backend]}


def _approve(up: Upgraded, kind: str, *args: str) -> dict[str, Any]:
    """Approve the thread as an operator would: a draft the old version did not date is refused
    first, in one line that says why and what to do, and then approved with --allow-stale."""
    thread, view = up.thread(kind), status(up, kind)
    if view["drafted_at"] is None:
        refused = up.cli.fails("approve", thread, *args)
        assert refused.returncode == 2 and "did not record when" in refused.stderr, refused.stderr
        assert "revise" in refused.stderr and "--allow-stale" in refused.stderr
        assert up.cli.archive_files() == [] and status(up, kind)["status"] == "awaiting_approval"
        args = (*args, "--allow-stale")
    out = dict(up.cli.ok("approve", thread, *args, "--json").json())
    if view["draft"].get("chart") is None:  # said at the decision, not published silently
        assert "fetched before drafts carried a price chart" in out["message"], out["message"]
    else:
        assert out["message"] == ""
    return out


def test_approve_publishes_one_report(upgraded: Upgraded) -> None:
    thread = upgraded.thread("gate")
    out = _approve(upgraded, "gate", "--user", "bob")
    assert out["status"] == "published" and out["publication"]["key"]
    [document] = upgraded.cli.archive_files()
    stored = json.loads(document.read_text())
    assert (stored["key"], stored["thread_id"], stored["approved_by"]) == (
        out["publication"]["key"],
        thread,
        "bob",
    )
    again = upgraded.cli.fails("approve", thread)
    assert "already published" in again.stderr and out["publication"]["key"] in again.stderr
    assert len(upgraded.cli.archive_files()) == 1
    assert _saved_values(upgraded, thread)["schema_version"] == SCHEMA_VERSION  # brought to this schema


def _saved_values(up: Upgraded, thread: str) -> dict[str, Any]:
    """The thread's latest checkpoint's values, read (and opened) by this version's saver."""
    from market_analyst.deps import open_checkpointer
    from market_analyst.settings import Settings

    with open_checkpointer(Settings.load(environ=up.cli.env, dotenv=None)) as backend:
        saved = backend.saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    return dict(saved.checkpoint["channel_values"])


def test_reject_publishes_nothing(upgraded: Upgraded) -> None:
    thread = upgraded.thread("gate")
    out = upgraded.cli.ok("reject", thread, "--reason", "figures are stale", "--json").json()
    assert out["status"] == "rejected" and out["publication"] is None
    assert upgraded.cli.archive_files() == []
    assert "rejected" in upgraded.cli.fails("approve", thread).stderr
    assert upgraded.cli.archive_files() == []


def test_revise_drafts_again_and_waits(upgraded: Upgraded) -> None:
    thread = upgraded.thread("revised")
    before = status(upgraded, "revised")["draft"]
    out = upgraded.cli.ok("revise", thread, "--feedback", "and the volatility", "--json").json()
    # The old static gate's thread now waits at this version's gate, with a request to answer.
    assert out["status"] == "awaiting_approval" and out["next"] == ["human_review"]
    assert out["request"]["revision"] == 3 and out["request"]["draft_id"] == out["draft"]["draft_id"]
    assert out["draft"]["revision"] == before["revision"] + 1 == 3
    assert out["draft"]["feedback"] == [*before["feedback"], "and the volatility"]
    assert upgraded.cli.archive_files() == []
    published = upgraded.cli.ok("approve", thread, "--json").json()  # a draft of today's code
    assert published["status"] == "published"
    # Revise analyses again but does not fetch again: a thread whose data predates charts says so.
    assert ("price chart" in published["message"]) == (before.get("chart") is None)
    assert len(upgraded.cli.archive_files()) == 1


def test_resume_takes_the_crashed_thread_to_the_gate(upgraded: Upgraded) -> None:
    thread = upgraded.thread("crashed")
    assert status(upgraded, "crashed")["status"] == "in_progress"
    out = upgraded.cli.ok("resume", thread, "--json").json()
    assert out["status"] == "awaiting_approval" and out["draft"]["revision"] == 1
    assert upgraded.cli.ok("approve", thread, "--json").json()["status"] == "published"
    assert len(upgraded.cli.archive_files()) == 1


@pytest.mark.parametrize("upgraded", FORKED_CASES, indirect=True)
def test_a_fork_made_at_the_gate_by_the_old_version_publishes(upgraded: Upgraded) -> None:
    draft = status(upgraded, "forked")["draft"]
    view = _approve(upgraded, "forked")
    assert view["status"] == "published" and view["publication"]["key"]
    assert view["draft"]["draft_id"] == draft["draft_id"] and view["draft"]["revision"] == draft["revision"]
    [document] = upgraded.cli.archive_files()
    assert json.loads(document.read_text())["key"] == view["publication"]["key"]


def test_a_fork_made_now_of_an_old_thread_publishes(upgraded: Upgraded) -> None:
    source = upgraded.thread("gate")
    history = upgraded.cli.ok("history", source, "--json").json()
    fork = upgraded.cli.ok("fork", source, "--checkpoint", history[-1]["checkpoint_id"], "--json").json()
    assert fork["status"] == "awaiting_approval"
    args = ("--allow-stale",) if fork["drafted_at"] is None else ()
    out = upgraded.cli.ok("approve", fork["thread_id"], *args)
    assert "archive key None" not in out.stdout
    assert upgraded.cli.ok("status", fork["thread_id"], "--json").json()["status"] == "published"
    assert len(upgraded.cli.archive_files()) == 1


def test_an_old_draft_is_still_refused_as_stale(upgraded: Upgraded) -> None:
    later = upgraded.at(timedelta(days=30))
    refused = upgraded.cli.fails("approve", upgraded.thread("gate"), extra_env=later)
    assert refused.returncode == 2 and "MA_MAX_DRAFT_AGE" in refused.stderr and "revise" in refused.stderr
    assert upgraded.cli.archive_files() == []
    out = upgraded.cli.ok(
        "approve", upgraded.thread("gate"), "--allow-stale", "--json", extra_env=later
    ).json()
    assert out["status"] == "published"


# --- The registry of state schemas --------------------------------------------------------------


def test_every_state_key_of_every_schema_is_accounted_for() -> None:
    assert registry_problems(frozenset(AnalystState.__annotations__)) == []
    assert max(STATE_KEYS) == SCHEMA_VERSION


def test_a_state_key_removed_without_a_migration_is_caught() -> None:
    declared = frozenset(AnalystState.__annotations__)
    # Removed from the state alone: the newest key list no longer matches.
    assert registry_problems(declared - {"drafted_at"})
    # Removed and listed as a new schema, but no migration carries it.
    keys = STATE_KEYS | {SCHEMA_VERSION + 1: STATE_KEYS[SCHEMA_VERSION] - {"drafted_at"}}
    problems = registry_problems(declared - {"drafted_at"}, SCHEMA_VERSION + 1, keys)
    assert any("without a migration" in p or "no migration" in p for p in problems), problems
    # With a migration that says where it went, it is complete.
    from market_analyst.workflow.upgrade import MIGRATIONS

    carried = Migration(SCHEMA_VERSION, apply=lambda values: {}, carries={"drafted_at": None})
    assert (
        registry_problems(
            declared - {"drafted_at"}, SCHEMA_VERSION + 1, keys, MIGRATIONS | {SCHEMA_VERSION: carried}
        )
        == []
    )


def test_every_fixture_names_its_version_and_commit() -> None:
    assert FIXTURE_VERSIONS, "no upgrade fixtures: make them with scripts/make-upgrade-fixtures.py"
    for version in FIXTURE_VERSIONS:
        manifest = json.loads((FIXTURES / version / "fixture.json").read_text())
        assert manifest.get("name", manifest["version"]) == version and len(manifest["commit"]) == 40
        assert set(manifest["backends"]) == set(BACKENDS)


# --- Sealed by `records encrypt` --------------------------------------------------------------------


def _clear_values(up: Upgraded) -> int:
    """How many values the store holds without a cipher name: written before checkpoint encryption."""
    return sum(_clear_by_thread(up.backend, up.store_url).values())


def _redis_sealed(value: Any) -> bool:
    from market_analyst.persistence.checkpoints.sealing import is_redis_sealed

    return is_redis_sealed(value)


def test_records_encrypt_seals_old_threads_which_then_approve_revise_and_resume(upgraded: Upgraded) -> None:
    kinds = list(upgraded.manifest["backends"][upgraded.backend])
    before = {kind: status(upgraded, kind) for kind in kinds}
    assert _clear_values(upgraded) > 0  # the old version wrote everything in clear
    out = upgraded.cli.ok("records", "encrypt", "--json").json()
    assert set(out["sealed"]) == {upgraded.thread(kind) for kind in kinds} and out["busy"] == []
    assert _clear_values(upgraded) == 0
    assert upgraded.cli.ok("records", "encrypt", "--json").json()["sealed"] == {}  # nothing left to do
    assert {kind: status(upgraded, kind) for kind in kinds} == before  # read back as they were

    assert _approve(upgraded, "gate", "--user", "bob")["status"] == "published"
    revised = upgraded.cli.ok(
        "revise", upgraded.thread("revised"), "--feedback", "and the volatility", "--json"
    )
    assert revised.json()["draft"]["revision"] == 3
    assert upgraded.cli.ok("approve", upgraded.thread("revised"), "--json").json()["status"] == "published"
    resumed = upgraded.cli.ok("resume", upgraded.thread("crashed"), "--json").json()
    assert resumed["status"] == "awaiting_approval"
    assert upgraded.cli.ok("approve", upgraded.thread("crashed"), "--json").json()["status"] == "published"
    assert len(upgraded.cli.archive_files()) == 3
    assert _clear_values(upgraded) == 0  # and what the decisions wrote is sealed too


def _clear_by_thread(backend: str, url: str) -> dict[str, int]:
    """Per thread, how many values it holds in clear."""
    if backend == "postgres":
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT thread_id, count(*) FROM ("
                "SELECT thread_id FROM checkpoint_blobs WHERE position('+' in type) = 0 AND type <> 'empty' "
                "UNION ALL SELECT thread_id FROM checkpoint_writes WHERE position('+' in type) = 0 "
                "UNION ALL SELECT thread_id FROM checkpoints, "
                "jsonb_each(checkpoint -> 'channel_values') AS v WHERE jsonb_typeof(v.value) <> 'null'"
                ") AS clear GROUP BY thread_id"
            ).fetchall()
        return {str(thread): int(n) for thread, n in rows}
    import redis

    client = redis.Redis.from_url(url)
    counts: dict[str, int] = {}
    for key in client.scan_iter(match="checkpoint*", count=1000):
        if client.type(key) != b"ReJSON-RL":
            continue
        doc = client.json().get(key)
        thread = str(doc.get("thread_id"))
        if key.startswith(b"checkpoint_write:"):
            clear = int("+" not in str(doc.get("type")))
        else:
            values = (doc.get("checkpoint") or {}).get("channel_values") or {}
            clear = sum(1 for v in values.values() if v is not None and not _redis_sealed(v))
        if clear:
            counts[thread] = counts.get(thread, 0) + clear
    client.close()
    return counts


@pytest.mark.parametrize("backend", BACKENDS)
def test_records_encrypt_killed_anywhere_leaves_each_thread_old_or_new_and_finishes_when_run_again(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, harness: Harness
) -> None:
    """Ten SIGKILLs a backend (20 in all): before and after the first, second and third thread's
    transaction, and at five moments of the command. After each, every thread holds all it held in
    clear or none of it; a second run seals the rest, and the threads read as before."""
    from tests.support.services import new_database

    root = FIXTURES / FIXTURE_VERSIONS[0]
    module = "postgres" if backend == "postgres" else "redis"
    seal = f"market_analyst.persistence.checkpoints.{module}:{module.capitalize()}Backend.seal_thread"
    points = [f"call:{when}:{seal}:{n}" for n in (1, 2, 3) for when in ("before", "after")]
    points += [f"at:{seconds}" for seconds in (0.05, 0.3, 0.6, 0.9, 1.2)][: 10 - len(points)]
    assert len(points) == 10
    killed = 0
    before: dict[str, dict] | None = None
    for run, point in enumerate(points):
        env = clean_environ() | {"MA_DATA_DIR": str(tmp_path / f"data-{run}")}
        if backend == "postgres":
            url = new_database(request.getfixturevalue("postgres_server"))
            load_postgres(url, root / "postgres")
            env |= {"POSTGRES_URL": url}
        else:
            url = request.getfixturevalue("upgrade_redis")
            load_redis(url, root / "redis")
            # A killed command's lease outlives it until it expires: a short one, waited out below.
            env |= {"MA_CHECKPOINTER": "redis", "REDIS_URL": url, "MA_LEASE_TTL_SECONDS": "1"}
        cli = Cli(env=env, cwd=tmp_path, harness=harness)
        original = _clear_by_thread(backend, url)
        if before is None:  # each run loads the same fixture: the first run's reading stands for all
            before = {t: cli.ok("status", t, "--json").json() for t in original}
        assert set(original) == set(before), point
        outcome = harness.run(["records", "encrypt"], env, kill_point=point)
        killed += outcome.killed
        after = _clear_by_thread(backend, url)
        for thread, count in original.items():  # old or new, never half
            assert after.get(thread, 0) in (0, count), (point, thread, after.get(thread), count)
        for _ in range(5):
            again = cli.run("records", "encrypt")
            if "busy" not in again.stderr:
                break
            time.sleep(1.2)
        assert again.returncode == 0, (point, again.stderr)
        assert _clear_by_thread(backend, url) == {}, point
        assert {t: cli.ok("status", t, "--json").json() for t in original} == before, point
    assert killed >= 6  # the six at a thread's transaction always land; the timed ones may miss
