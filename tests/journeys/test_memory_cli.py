"""The memory commands as a user runs them, each step its own process: `remember`, `memories
list|show|forget`, `remember --replaces`, `forget --user` and `prune --memories-older-than`; several
processes remembering at once; and every mistake a user can make answered with one line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from market_analyst.persistence.memory.edge import EdgeMemoryStore
from market_analyst.persistence.memory.embedder import WordLlamaEmbedder
from market_analyst.state import Memory, memory_id
from tests.support.cli import Cli, clean_environ
from tests.support.crashkit import Harness
from tests.support.embeddings_server import EmbeddingsServer


@pytest.fixture(scope="module")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture
def mem_cli(tmp_path: Path, harness: Harness) -> Cli:
    """The CLI on a data directory of its own; memory commands need no checkpointer."""
    return Cli(env=clean_environ() | {"MA_DATA_DIR": str(tmp_path / "data")}, cwd=tmp_path, harness=harness)


def _store(cli: Cli, embedder: WordLlamaEmbedder) -> EdgeMemoryStore:
    """This test process's own view of the CLI's store (a separate process from every command)."""
    from market_analyst.deps import memory_marker_key
    from market_analyst.settings import Settings

    key = memory_marker_key(Settings.load(environ=cli.env, dotenv=None))
    return EdgeMemoryStore(cli.data_dir / "memories", embedder=lambda: embedder, marker_key=key)


def _ids(cli: Cli, *args: str) -> list[str]:
    return [m["id"] for m in cli.ok("memories", "list", "--json", *args).json()]


def test_remember_recall_replace_forget_each_in_its_own_process(
    mem_cli: Cli, embedder: WordLlamaEmbedder
) -> None:
    cli, store = mem_cli, _store(mem_cli, embedder)
    kept = cli.ok(
        "remember", "--user", "ann", "Watch supplier concentration at TSMC", "--ticker", "nvda", "--json"
    )
    first = kept.json()
    assert first["ticker"] == "NVDA" and first["kind"] == "remembered" and first["owner"] == "ann"
    assert _ids(cli, "--user", "ann") == [first["id"]] and _ids(cli, "--user", "bob") == []
    assert [m.id for m in store.recall("ann", "what did I say about suppliers?", ticker="NVDA")] == [
        first["id"]
    ]
    assert store.recall("bob", "what did I say about suppliers?") == []
    again = cli.ok("remember", "--user", "ann", "Watch supplier concentration at TSMC", "--ticker", "NVDA")
    assert first["id"] in again.stdout and len(_ids(cli, "--user", "ann")) == 1  # the same note is one memory

    second = cli.ok(
        "remember",
        "--user",
        "ann",
        "Watch foundry dependence: one fab",
        "--ticker",
        "NVDA",
        "--replaces",
        first["id"],
        "--json",
    ).json()
    assert second["replaces"] == first["id"]
    assert _ids(cli, "--user", "ann") == [second["id"]]
    assert set(_ids(cli, "--user", "ann", "--all")) == {first["id"], second["id"]}
    assert "(superseded)" in cli.ok("memories", "list", "--user", "ann", "--all").stdout
    recalled = [
        m.id for m in store.recall("ann", "supplier concentration foundry TSMC", ticker="NVDA", limit=10)
    ]
    assert recalled == [second["id"]]
    shown = cli.ok("memories", "show", second["id"], "--user", "ann").stdout
    assert "foundry dependence" in shown and f"replaces:    {first['id']}" in shown

    cli.ok("memories", "forget", second["id"], "--user", "ann")  # the one it replaced comes back
    assert _ids(cli, "--user", "ann") == [first["id"]]
    assert [m.id for m in store.recall("ann", "supplier concentration foundry TSMC", ticker="NVDA")] == [
        first["id"]
    ]
    cli.ok("memories", "forget", first["id"], "--user", "ann")
    assert store.recall("ann", "supplier concentration foundry TSMC", ticker="NVDA", limit=10) == []
    assert _ids(cli, "--user", "ann", "--all") == []
    assert cli.ok("memories", "list", "--user", "ann").stderr.strip() == "No memories."


def test_a_killed_erasure_leaves_no_copy_once_any_command_opens_the_store(mem_cli: Cli) -> None:
    """`memories forget` rewrites the store beside it: killed once the copy is built, the copy (every
    other memory) is gone as soon as the next command opens the store, a read included, and the
    erasure, run again, completes."""
    cli = mem_cli
    ids = [cli.ok("remember", "--user", "ann", f"note {n} on {t}", "--json").json()["id"]
           for n, t in enumerate(("NVDA", "AMD", "TSMC"))]  # fmt: skip
    assert cli.harness is not None
    killed = cli.harness.run(
        ["memories", "forget", ids[0], "--user", "ann"],
        cli.env,
        "call:after:market_analyst.persistence.qdrant.edge_shard:build_beside",
        cwd=cli.cwd,
    )
    copy = cli.data_dir / "memories" / "shard.edge-new"
    assert killed.killed and copy.is_dir()
    assert sorted(_ids(cli, "--user", "ann")) == sorted(ids)  # the erasure never happened
    assert not copy.exists()
    cli.ok("memories", "forget", ids[0], "--user", "ann")
    assert sorted(_ids(cli, "--user", "ann")) == sorted(ids[1:])
    assert sorted(p.name for p in cli.data_dir.iterdir() if p.name.startswith("memories")) == ["memories"]


def test_every_mistake_is_one_line_and_exit_2(mem_cli: Cli) -> None:
    cli = mem_cli
    mine = cli.ok("remember", "--user", "ann", "A note of ann's", "--json").json()["id"]
    unknown = "00000000-0000-4000-8000-000000000000"
    cases = [
        (("memories", "show", unknown, "--user", "ann"), f"no memory {unknown} for user ann"),
        (("memories", "show", mine, "--user", "bob"), f"no memory {mine} for user bob"),
        (("memories", "forget", mine, "--user", "bob"), f"no memory {mine} for user bob"),
        (("memories", "forget", "not-an-id", "--user", "ann"), "invalid memory ID"),
        (("remember", "--user", "bob", "mine now", "--replaces", mine), f"no memory {mine} for user bob"),
        (("remember", "--user", "ann", "x" * 1001), "at most 1000 characters"),
        (("remember", "--user", "ann", "two\nlines"), "control characters"),
        (("remember", "--user", "ann", "  "), "empty"),
        (("remember", "--user", "ann", "fine", "--ticker", "NV DA!"), "malformed ticker"),
        (("remember", "--user", "bad user", "fine"), "invalid user ID"),
        (("prune", "--memories-older-than", "a year", "--yes"), "not an age"),
        (("prune", "--yes"), "--memories-older-than"),
        (("remember", "--user", "ann", "a lone\u200djoiner"), "U+200D"),
    ]
    for args, expected in cases:
        failed = cli.fails(*args)
        assert failed.returncode == 2 and expected in failed.stderr, (args, failed.stderr)
    assert _ids(cli, "--user", "ann") == [mine] and _ids(cli, "--user", "bob") == []  # nothing changed
    # An emoji sequence joined by U+200D is a note like any other, shown as it was typed.
    team = "ask the \U0001f469\u200d\U0001f4bb team about margins"
    kept = cli.ok("remember", "--user", "ann", team, "--json").json()["id"]
    assert cli.ok("memories", "show", kept, "--user", "ann", "--json").json()["text"] == team
    assert team in cli.ok("memories", "list", "--user", "ann").stdout


def test_eight_processes_remembering_for_one_user_at_once_lose_none(mem_cli: Cli) -> None:
    cli = mem_cli
    assert cli.harness is not None
    jobs = [
        (["remember", "--user", "ann", f"Note {i}: watch the drawdown in week {i}"], cli.env)
        for i in range(8)
    ]
    for outcome in cli.harness.run_together(jobs, cwd=cli.cwd):
        outcome.check()
    listed = cli.ok("memories", "list", "--user", "ann", "--json").json()
    assert sorted(m["text"] for m in listed) == sorted(
        f"Note {i}: watch the drawdown in week {i}" for i in range(8)
    )
    # The same note from four processes at once is one memory.
    same = [(["remember", "--user", "ann", "Said four times at once", "--ticker", "NVDA"], cli.env)] * 4
    for outcome in cli.harness.run_together(same, cwd=cli.cwd):
        outcome.check()
    assert len(_ids(cli, "--user", "ann")) == 9


def _note(owner: str, text: str, *, days_ago: float, now: datetime) -> Memory:
    return Memory(
        id=memory_id("feedback", owner, "t-" + owner, text),
        owner=owner,
        kind="feedback",
        text=text,
        ticker="NVDA",
        created_at=now - timedelta(days=days_ago),
        thread_id="t-" + owner,
        said_by="rita",
        verified=True,
    )


def _points(store: EdgeMemoryStore) -> dict[str, str]:
    """Every point of the collection, payload and vectors, as canonical JSON by ID."""
    return {p["id"]: json.dumps(p, sort_keys=True) for p in store.all_points()}


def test_forget_user_leaves_no_point_of_theirs_and_others_untouched(
    cli: Cli, embedder: WordLlamaEmbedder
) -> None:
    store, now = _store(cli, embedder), datetime.now(UTC)
    secret = "Ann's private worry: the Taiwan fab dependence"
    store.write(
        [_note("ann", secret, days_ago=1, now=now), _note("ann", "Ann again: margins", days_ago=3, now=now)]
    )
    store.write([_note("bob", "Bob's view: margins hold up", days_ago=2, now=now)])
    store.write([_note("cy", "Cy asks for a peer comparison", days_ago=2, now=now)])
    cli.ok("remember", "--user", "ann", "Ann kept this one herself")
    others = {k: v for k, v in _points(store).items() if json.loads(v)["payload"]["owner"] != "ann"}
    assert len(others) == 2

    assert cli.ok("forget", "--user", "ann", "--dry-run", "--json").json()["memories"] == 3
    report = cli.ok("forget", "--user", "ann", "--yes")
    assert "memories: 3" in report.stdout

    after = _points(store)
    assert after == others  # byte for byte, payload and vectors
    assert not any("Ann" in v for v in after.values())
    assert not store.has_memories("ann")
    # Her text is gone from the files too, not just hidden from queries.
    files = b"".join(p.read_bytes() for p in (cli.data_dir / "memories").rglob("*") if p.is_file())
    assert secret.encode() not in files and b"Bob's view" in files
    assert "memories: 0" in cli.ok("forget", "--user", "ann", "--yes").stdout  # idempotent


def test_prune_memories_older_than(mem_cli: Cli, embedder: WordLlamaEmbedder) -> None:
    cli, store, now = mem_cli, _store(mem_cli, embedder), datetime.now(UTC)
    store.write(
        [
            _note("ann", "From two years ago", days_ago=730, now=now),
            _note("ann", "Recent", days_ago=3, now=now),
        ]
    )
    store.write([_note("bob", "Bob, last year and a bit", days_ago=400, now=now)])
    assert "Would remove 2 memories" in cli.ok("prune", "--memories-older-than", "365d", "--dry-run").stdout
    assert "--yes" in cli.fails("prune", "--memories-older-than", "365d").stderr  # no terminal to ask on
    done = cli.ok("prune", "--memories-older-than", "365d", "--yes", "--json").json()
    assert done["memories"] == 2 and done["threads"] == []
    assert [m["text"] for m in cli.ok("memories", "list", "--user", "ann", "--json").json()] == ["Recent"]
    assert _ids(cli, "--user", "bob") == []


def _qdrant_url() -> str | None:
    return os.environ.get("MA_TEST_QDRANT_URL")


@pytest.fixture
def server_cli(tmp_path: Path, harness: Harness) -> Iterator[Cli]:
    url = _qdrant_url()
    if url is None:
        pytest.skip("no Qdrant server can run on this machine; set MA_TEST_QDRANT_URL to one to run this")
    yield Cli(
        env=clean_environ() | {"MA_DATA_DIR": str(tmp_path / "data"), "QDRANT_URL": url},
        cwd=tmp_path,
        harness=harness,
    )


def test_remember_replace_forget_on_a_qdrant_server(server_cli: Cli) -> None:
    cli = server_cli
    user = f"ann-{os.getpid()}"
    first = cli.ok("remember", "--user", user, "Watch supplier concentration", "--json").json()["id"]
    second = cli.ok(
        "remember", "--user", user, "Watch foundry dependence", "--replaces", first, "--json"
    ).json()["id"]
    assert _ids(cli, "--user", user) == [second]
    assert set(_ids(cli, "--user", user, "--all")) == {first, second}
    cli.ok("memories", "forget", second, "--user", user)
    assert "memories: 1" in cli.ok("forget", "--user", user, "--yes").stdout
    assert _ids(cli, "--user", user, "--all") == []


def test_an_unreachable_qdrant_server_is_one_line_and_exit_69(mem_cli: Cli) -> None:
    down = {"QDRANT_URL": "http://127.0.0.1:9"}  # nothing listens on the discard port
    for args in (("remember", "--user", "ann", "kept?"), ("memories", "list", "--user", "ann")):
        failed = mem_cli.fails(*args, extra_env=down)
        assert failed.returncode == 69 and "did not answer" in failed.stderr, failed.stderr
    assert not (mem_cli.data_dir / "memories").exists()  # nothing fell back to the embedded store


# Where an erasure or a reindex is killed: inside the new shard's making, and after each rename of
# the swap (the store moved aside; the new shard marked complete; the new shard in place).
KILLS = [
    ("forget", "after:market_analyst.persistence.memory.edge:EdgeMemoryStore._build"),
    ("forget", "after:os:rename:1"),
    ("forget", "after:os:rename:2"),
    ("forget", "after:os:rename:3"),
    ("reindex", "after:os:rename:1"),
    ("reindex", "after:os:rename:2"),
]


@pytest.mark.parametrize(("command", "kill"), KILLS)
def test_a_kill_during_a_rewrite_leaves_the_old_shard_or_the_new(
    mem_cli: Cli, embedder: WordLlamaEmbedder, command: str, kill: str
) -> None:
    from tests.support import store_child

    cli, store, now = mem_cli, _store(mem_cli, embedder), datetime.now(UTC)
    kept = [_note(who, f"{who}'s note on margins", days_ago=2, now=now) for who in ("ann", "bob", "cy")]
    gone = _note("ann", "Ann's note to forget", days_ago=1, now=now)
    store.write([*kept, gone])
    before = _points(store)
    args = (
        ["memories", "forget", gone.id, "--user", "ann"] if command == "forget" else ["memories", "reindex"]
    )
    child = store_child.start(args, env=cli.env, cwd=cli.cwd, kill=kill)
    child.communicate(timeout=120)
    assert child.returncode == -9, f"{kill} was not reached"

    after = _points(store)  # the next opening finishes or undoes what the kill left
    expected = {k: v for k, v in before.items() if k != gone.id}
    if command == "forget":
        assert after in (before, expected)
    else:
        assert set(after) == set(before)  # re-embedded with the same model: the same points
    if command == "reindex" or gone.id in after:
        cli.ok(*args)  # run again, it finishes the job
    assert _points(store) == (before if command == "reindex" else expected)
    leftovers = [p.name for p in cli.data_dir.iterdir() if p.name.startswith("memories.")]
    assert leftovers == []


def test_the_embedder_is_chosen_by_setting_and_a_change_asks_for_reindex(mem_cli: Cli):
    """`MA_EMBEDDER=openai` embeds through an OpenAI-compatible endpoint (the test's stand-in speaks
    its protocol) at the store's 256 dimensions; the bundled model then refuses the store until
    `memories reindex`, which embeds every memory again with it."""
    server = EmbeddingsServer()
    try:
        remote = {"MA_EMBEDDER": "openai", "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": server.url}
        mem_cli.ok(
            "remember", "--user", "ann", "watch supplier concentration", "--ticker", "NVDA", extra_env=remote
        )
        assert server.requests, "MA_EMBEDDER=openai embedded nothing through the endpoint"
        assert {(r["path"], r["model"], r["dimensions"]) for r in server.requests} == {
            ("/v1/embeddings", "text-embedding-3-small", 256)
        }

        gone = dict(remote, OPENAI_BASE_URL="http://127.0.0.1:9/v1", MA_LLM_TIMEOUT="2")
        down = mem_cli.fails("remember", "--user", "ann", "the endpoint is down", extra_env=gone)
        assert down.returncode == 69 and "embeddings endpoint did not answer" in down.stderr

        refused = mem_cli.fails("remember", "--user", "ann", "figures are stale")
        assert refused.returncode == 2
        assert "openai/text-embedding-3-small" in refused.stderr and "memories reindex" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1

        mem_cli.ok("memories", "reindex")
        mem_cli.ok("remember", "--user", "ann", "figures are stale")
        texts = {m["text"] for m in mem_cli.ok("memories", "list", "--user", "ann", "--json").json()}
        assert texts == {"watch supplier concentration", "figures are stale"}

        no_key = mem_cli.fails("remember", "--user", "ann", "x", extra_env={"MA_EMBEDDER": "openai"})
        assert no_key.returncode == 2 and "needs OPENAI_API_KEY" in no_key.stderr
        assert len(no_key.stderr.strip().splitlines()) == 1
    finally:
        server.close()


def test_a_chain_of_replacements_holds_on_the_command_line(mem_cli: Cli) -> None:
    """`--replaces` on a memory already replaced is refused naming the current one; keeping a replaced
    text again is refused, pointing at `--replaces`; forgetting the current memory says that the one
    it replaced is recalled again, and it is."""
    cli = mem_cli
    first = cli.ok("remember", "--user", "ann", "Watch the fab", "--json").json()["id"]
    second = cli.ok("remember", "--user", "ann", "Watch both fabs", "--replaces", first, "--json").json()[
        "id"
    ]
    refused = cli.fails("remember", "--user", "ann", "Watch three fabs", "--replaces", first)
    assert (
        refused.returncode == 2
        and f"already replaced by {second}: give --replaces {second}" in refused.stderr
    )
    again = cli.fails("remember", "--user", "ann", "Watch the fab")
    assert again.returncode == 2 and f"remember it with --replaces {second}" in again.stderr
    assert _ids(cli, "--user", "ann") == [second]  # neither wrote anything
    forgot = cli.ok("memories", "forget", second, "--user", "ann")
    assert f"Memory {first}, which it had replaced, is recalled again." in forgot.stdout
    assert _ids(cli, "--user", "ann") == [first]
    assert cli.ok("memories", "forget", first, "--user", "ann", "--json").json()["recalled_again"] is None


def test_the_documented_sparse_copy_is_a_whole_store_of_its_own_size(mem_cli: Cli, tmp_path: Path) -> None:
    """docs/memory.md and docs/operations.md: `cp -a --sparse=always` of `MA_DATA_DIR/memories` is the
    whole store (another data directory with only that folder lists, checks and recalls it), and the
    copy takes on disk what the store holds, not the engine's preallocated size."""
    import subprocess

    cli = mem_cli
    kept = cli.ok("remember", "--user", "ann", "Watch supplier concentration at TSMC", "--json").json()
    source = cli.data_dir / "memories"
    apparent = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
    other = tmp_path / "other-data"
    other.mkdir()
    subprocess.run(["cp", "-a", "--sparse=always", str(source), str(other / "memories")], check=True)
    allocated = sum(p.stat().st_blocks * 512 for p in (other / "memories").rglob("*") if p.is_file())
    assert apparent > 100_000_000 and allocated < apparent / 10, (apparent, allocated)

    moved = Cli(env=cli.env | {"MA_DATA_DIR": str(other)}, cwd=tmp_path, harness=cli.harness)
    assert [m["id"] for m in moved.ok("memories", "list", "--user", "ann", "--json").json()] == [kept["id"]]
    assert moved.ok("memories", "check").returncode == 0
