"""What only the Redis checkpointer has to prove, on real Redis servers: the lease (busy while held,
free after a killed holder's key expires, fenced after a stall), the preflight against a Redis
without modules, a SIGKILLed and restarted server that still holds a paused thread, the shallow
saver, `--checkpointer redis`, and `make demo` on Redis."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import redis

from market_analyst.deps import build_deps, open_checkpointer
from market_analyst.errors import ThreadBusy
from market_analyst.graph import build_graph
from market_analyst.persistence.checkpoints.redis import FENCE_PREFIX, LEASE_PREFIX, LeaseLost
from market_analyst.settings import Settings
from tests.support.cli import Cli, clean_environ, unique_id
from tests.support.crashkit import Harness
from tests.support.lease_holder import hold_lease
from tests.support.make import run_make
from tests.support.services import RedisServer

on_redis = pytest.mark.parametrize("cli", ["redis"], indirect=True)


def _settings(tmp_path: Path, redis_url: str, **extra: str) -> Settings:
    environ = {"MA_DATA_DIR": str(tmp_path / "data"), "MA_CHECKPOINTER": "redis", "REDIS_URL": redis_url}
    return Settings.load(environ=environ | extra, dotenv=None)


def _status(cli: Cli, thread: str) -> dict:
    return cli.ok("status", thread, "--json").json()  # type: ignore[return-value]


@on_redis
def test_lease_is_busy_while_held_renewed_past_its_ttl_and_free_after_a_killed_holder_expires(cli: Cli):
    ttl = 1.5
    thread = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]  # type: ignore[index]
    before = _status(cli, thread)
    holder = hold_lease(cli.harness, thread, cli.env | {"MA_LEASE_TTL_SECONDS": str(ttl)})
    try:
        time.sleep(ttl * 2)  # longer than the TTL: only renewal keeps the key alive
        busy = cli.fails("approve", thread)
        assert f"thread {thread} is busy" in busy.stderr
        assert _status(cli, thread) == before  # the refused command changed nothing
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()

    client = redis.Redis.from_url(cli.env["REDIS_URL"])
    assert client.pttl(LEASE_PREFIX + thread) > 0  # a killed holder cannot release; the key expires
    deadline = time.monotonic() + ttl * 4
    while client.exists(LEASE_PREFIX + thread) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not client.exists(LEASE_PREFIX + thread)
    assert _status(cli, thread)["status"] == "awaiting_approval"
    cli.ok("approve", thread, "--user", "bob")
    assert _status(cli, thread)["status"] == "published"
    # Fencing tokens count acquisitions: analyze, the killed holder, approve.
    assert int(client.get(FENCE_PREFIX + thread)) == 3
    assert not client.exists(LEASE_PREFIX + thread)  # released by its holder on exit


def test_a_second_lease_in_the_same_process_is_refused_at_once(tmp_path: Path, redis_url: str):
    settings = _settings(tmp_path, redis_url)
    thread = unique_id("t-lease")
    with open_checkpointer(settings) as first, open_checkpointer(settings) as second:
        with first.lease(thread):
            started = time.monotonic()
            with pytest.raises(ThreadBusy, match=f"thread {thread} is busy"):
                with second.lease(thread):
                    pass
            assert time.monotonic() - started < 1  # refused, not waited for
        with second.lease(thread):
            pass


def test_a_holder_that_lost_its_lease_writes_nothing_and_leaves_the_new_holder_alone(
    tmp_path: Path, redis_url: str
):
    settings = _settings(tmp_path, redis_url)
    thread = unique_id("t-fence")
    config = {"configurable": {"thread_id": thread}}
    client = redis.Redis.from_url(redis_url)
    with open_checkpointer(settings) as backend:
        graph = build_graph(checkpointer=backend.saver)
        with backend.lease(thread):
            inputs = {"ticker": "NVDA", "question": "", "user_id": "ann", "feedback": []}
            graph.invoke(inputs, config, context=build_deps(settings))
            checkpoints = len(list(backend.saver.list(config)))
            # As if this process stalled past its TTL and another command took the thread over.
            client.set(LEASE_PREFIX + thread, 10_000)
            with pytest.raises(LeaseLost, match=f"thread {thread}: this command lost its lease"):
                graph.update_state(config, {"feedback": ["late"]})
        assert len(list(backend.saver.list(config))) == checkpoints
        # Written by the graph alone, so the thread index does not list it: gone before other tests
        # list the shared server (which refuses threads the index lacks).
        backend.saver.delete_thread(thread)
    assert client.get(LEASE_PREFIX + thread) == b"10000"  # release deleted only its own token


@on_redis
def test_a_redis_without_search_and_json_is_refused_before_anything_is_written(cli: Cli, tmp_path: Path):
    plain = RedisServer(tmp_path / "plain-redis", modules=False).start()
    try:
        client = redis.Redis(port=plain.port)
        assert client.execute_command("MODULE", "LIST") == []  # the same binary, no modules: a plain Redis
        thread = unique_id("t-plain")
        result = cli.fails("analyze", "NVDA", "--thread-id", thread, extra_env={"REDIS_URL": plain.url})
        assert result.returncode == 2
        assert "lacks the search module" in result.stderr and "JSON module" in result.stderr
        assert "redis:8" in result.stderr and f"127.0.0.1:{plain.port}" in result.stderr
        assert client.dbsize() == 0
        assert client.execute_command("MODULE", "LIST") == []
        assert not (cli.data_dir / "reports").exists() or not list((cli.data_dir / "reports").iterdir())
    finally:
        plain.stop()


@on_redis
def test_unreachable_redis_names_the_url_without_its_password(cli: Cli):
    result = cli.fails("analyze", "NVDA", extra_env={"REDIS_URL": "redis://ann:hunter2secret@127.0.0.1:9/0"})
    assert "redis://ann@127.0.0.1:9/0" in result.stderr
    assert "hunter2secret" not in result.stderr
    assert "docker compose up -d redis" in result.stderr


@on_redis
def test_redis_without_a_url_says_so(cli: Cli):
    env = {k: v for k, v in cli.env.items() if k != "REDIS_URL"}
    result = Cli(env=env, cwd=cli.cwd, harness=cli.harness).fails("threads")
    assert "MA_CHECKPOINTER=redis needs REDIS_URL" in result.stderr


def test_checkpointer_option_selects_redis(cli: Cli, redis_url: str):
    # The fixture's environment selects PostgreSQL; the option and REDIS_URL switch this run to Redis.
    env = {"REDIS_URL": redis_url}
    thread = cli.ok("analyze", "MSFT", "--json", "--checkpointer", "redis", extra_env=env).json()["thread_id"]  # type: ignore[index]
    listed = cli.ok("threads", "--pending", "--json", "--checkpointer", "redis", extra_env=env).json()
    assert thread in [t["thread_id"] for t in listed]  # type: ignore[union-attr,index]
    assert "unknown thread" in cli.fails("status", thread).stderr  # nothing went to PostgreSQL
    cli.ok("approve", thread, "--checkpointer", "redis", extra_env=env)


@on_redis
def test_shallow_saver_keeps_one_checkpoint_and_still_approves(cli: Cli):
    shallow = {"MA_REDIS_SHALLOW": "true"}
    thread = cli.ok("analyze", "TSLA", "--json", extra_env=shallow).json()["thread_id"]  # type: ignore[index]
    client = redis.Redis.from_url(cli.env["REDIS_URL"])
    assert len(list(client.scan_iter(f"checkpoint:{thread}:*"))) == 1
    cli.ok("approve", thread, extra_env=shallow)
    assert cli.ok("status", thread, "--json", extra_env=shallow).json()["status"] == "published"  # type: ignore[index]
    assert len(list(client.scan_iter(f"checkpoint:{thread}:*"))) == 1


def _own_redis_env(tmp_path: Path, server: RedisServer) -> dict[str, str]:
    """A data directory in `tmp_path` whose checkpoints are on `server`, a Redis of the test's own."""
    return clean_environ() | {
        "MA_DATA_DIR": str(tmp_path / "data"),
        "MA_CHECKPOINTER": "redis",
        "REDIS_URL": server.url,
    }


def test_a_killed_and_restarted_redis_still_holds_the_paused_thread(tmp_path: Path, harness: Harness):
    server = RedisServer(tmp_path / "redis").start()
    try:
        env = _own_redis_env(tmp_path, server)
        cli = Cli(env=env, cwd=tmp_path, harness=harness)
        thread = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]  # type: ignore[index]
        server.kill()  # SIGKILL: no shutdown save; only the append-only file, fsynced per write, remains
        assert "cannot connect to Redis" in cli.fails("status", thread).stderr
        server.start()
        assert _status(cli, thread)["status"] == "awaiting_approval"
        cli.ok("approve", thread, "--user", "bob")
        after = _status(cli, thread)
        assert after["status"] == "published"
        documents = list((tmp_path / "data" / "reports").glob("*.json"))
        assert [d.stem for d in documents] == [after["publication"]["key"]]
    finally:
        server.stop()


def test_make_demo_runs_on_redis(tmp_path: Path, redis_url: str):
    data_dir = tmp_path / "demo-data"
    env = clean_environ() | {"MA_DATA_DIR": str(data_dir), "MA_CHECKPOINTER": "redis", "REDIS_URL": redis_url}
    result = run_make("demo", env=env, timeout=300)
    documents = list((data_dir / "reports").glob("*.json"))
    assert len(documents) == 1
    assert "bundled snapshot, as of 2025-02-14" in json.loads(documents[0].read_text())["markdown"]
    assert not (data_dir / "postgres").exists()  # the embedded PostgreSQL was never started
    assert "== What next" in result.stdout and "PostgreSQL" not in result.stdout.split("== What next")[1]


def test_the_strict_serializer_revives_messages_and_imports_no_other_name():
    """The LLM analyst's messages come back as messages; an envelope naming any other module is left
    as it is, announced as blocked, and its module is never imported."""
    import sys

    from langchain_core.load import dumpd
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener

    from market_analyst.persistence.checkpoints.redis_serde import StrictRedisSerializer

    serde, blocked = StrictRedisSerializer(), []
    unregister = register_serde_event_listener(blocked.append)
    sys.modules.pop("tests.support.planted", None)
    try:
        assert serde._revive_if_needed(dumpd(AIMessage(content="hi"))) == AIMessage(content="hi")
        for lc in (1, 2):
            envelope = {"lc": lc, "type": "constructor", "id": ["tests", "support", "planted", "Planted"]}
            envelope["kwargs"] = {"payload": "rm -rf /"}
            assert serde._revive_if_needed({"question": envelope}) == {"question": envelope}
    finally:
        unregister()
    assert "tests.support.planted" not in sys.modules
    assert [(e["kind"], e["name"]) for e in blocked] == [("msgpack_blocked", "Planted")] * 2


def test_a_failed_nodes_error_write_is_kept_as_its_text_and_an_older_envelope_still_loads():
    """LangGraph saves a failed node's exception in the checkpoint: it is kept as its text (as msgpack
    keeps it on PostgreSQL), not as an envelope that strict loading refuses; the envelope an earlier
    release wrote for an error of Python's or of this program's loads as the error's name, and any
    other class's envelope is still refused."""
    from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener

    from market_analyst.errors import ServiceUnavailable
    from market_analyst.persistence.checkpoints.redis_serde import StrictRedisSerializer

    serde, blocked = StrictRedisSerializer(), []
    unregister = register_serde_event_listener(blocked.append)
    try:
        error = ServiceUnavailable("the records database is away")
        assert serde.loads_typed(serde.dumps_typed(error)) == repr(error)
        for module, name in (("market_analyst.errors", "ServiceUnavailable"), ("builtins", "OSError")):
            envelope = {"lc": 2, "type": "constructor", "id": [*module.split("."), name], "kwargs": {}}
            assert serde._revive_if_needed(envelope) == f"{name}()"
        for names in (["os", "system"], ["market_analyst", "errors", "not_a_class"], ["builtins", "print"]):
            envelope = {"lc": 2, "type": "constructor", "id": names, "kwargs": {}}
            assert serde._revive_if_needed(envelope) == envelope
    finally:
        unregister()
    assert [e["name"] for e in blocked] == ["system", "not_a_class", "print"]


def test_a_checkpoint_saved_while_its_writes_are_stored_keeps_them(tmp_path: Path, redis_url: str):
    """With `MA_DURABILITY=exit`, LangGraph stores a run's last checkpoint and the gate's request (a
    pending write) at once, from two threads. Here the checkpoint lands in the middle of the writes'
    storing (after their documents, before their registry entry): the writes still read back, so the
    thread reads as waiting at the gate, not in progress."""
    from langgraph.checkpoint.base import empty_checkpoint

    with open_checkpointer(_settings(tmp_path, redis_url)) as backend:
        saver = backend.saver
        thread = unique_id("interleaved")
        checkpoint = empty_checkpoint()
        at = {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint["id"]}
        config = {"configurable": at}
        registry = saver._key_registry
        register = registry.register_write_keys_batch

        def checkpoint_first(*args, **kwargs):
            saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, checkpoint, {}, {})
            return register(*args, **kwargs)

        registry.register_write_keys_batch = checkpoint_first
        try:
            saver.put_writes(config, [("__interrupt__", "the gate's request")], "task-1")
        finally:
            registry.register_write_keys_batch = register
        writes = saver.get_tuple(config).pending_writes
        assert [(task, channel, value) for task, channel, value in writes] == [
            ("task-1", "__interrupt__", "the gate's request")
        ]


def test_a_search_cut_off_by_a_killed_redis_is_a_lost_checkpointer_not_an_internal_error(
    tmp_path: Path, harness: Harness
):
    """redisvl wraps the lost connection of a search (a thread's history, its pending writes) in its
    own `RedisSearchError`: that is still the server gone away, said as one `ServiceUnavailable` (exit
    69, 503), not an internal error or a thread that "is unknown: nothing was saved"."""
    from market_analyst.errors import ServiceUnavailable
    from market_analyst.workflow.graph_run import open_run
    from market_analyst.workflow.views import config_for

    server = RedisServer(tmp_path / "redis").start()
    try:
        env = _own_redis_env(tmp_path, server)
        thread = (
            Cli(env=env, cwd=tmp_path, harness=harness).ok("analyze", "NVDA", "--json").json()["thread_id"]
        )
        with pytest.raises(ServiceUnavailable, match="lost the checkpointer") as lost:
            with open_run(Settings.load(environ=env, dotenv=None)) as run:
                server.kill()
                list(run.graph.get_state_history(config_for(thread)))
        said = str(lost.value)
        assert "Error while searching" in said and "nothing that finished was lost" in said, said
    finally:
        server.stop()
