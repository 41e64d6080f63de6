"""A writer that does not keep the thread index (a version from before it, run on the same data after
this one indexed the store) makes threads that listings, `prune` and `forget` would silently miss.
They are detected and refused in one line until `threads --reindex` indexes every thread again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from market_analyst.deps import build_deps, open_checkpointer
from market_analyst.graph import build_graph
from market_analyst.settings import Settings
from tests.support.cli import Cli, unique_id
from tests.support.services import RedisServer


@pytest.fixture(params=["postgres", "redis"])
def own_store(request: pytest.FixtureRequest, cli: Cli, tmp_path: Path) -> Iterator[Cli]:
    """The CLI on a store nobody else uses: the test's own database, or a Redis server of its own."""
    if request.param == "postgres":
        yield cli
        return
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield Cli(
            env=cli.env | {"MA_CHECKPOINTER": "redis", "REDIS_URL": server.url},
            cwd=cli.cwd,
            harness=cli.harness,
        )
    finally:
        server.stop()


def _written_without_the_index(cli: Cli, thread_id: str) -> None:
    """A run to the gate as a version from before the thread index made it: the graph over the saver,
    and no index row."""
    settings = Settings.load(environ=cli.env, dotenv=None)
    with open_checkpointer(settings) as backend:
        graph = build_graph(checkpointer=backend.saver)
        inputs = {"ticker": "MSFT", "question": "", "user_id": "ann", "feedback": []}
        graph.invoke(inputs, {"configurable": {"thread_id": thread_id}}, context=build_deps(settings))


def test_threads_an_older_writer_added_are_refused_until_reindexed(own_store: Cli) -> None:
    cli = own_store
    indexed, unindexed = unique_id("indexed"), unique_id("unindexed")
    cli.ok("analyze", "NVDA", "--user", "ann", "--thread-id", indexed)
    assert [row["thread_id"] for row in cli.ok("threads", "--json").json()] == [indexed]  # index complete
    _written_without_the_index(cli, unindexed)
    assert cli.ok("status", unindexed, "--json").json()["status"] == "awaiting_approval"

    for command in (["threads"], ["threads", "--pending"], ["forget", "--user", "ann", "--yes"],
                    ["prune", "--finished-before", "0d", "--yes"]):  # fmt: skip
        refused = cli.fails(*command)
        assert refused.returncode == 2 and unindexed in refused.stderr, refused.stderr
        assert "threads --reindex" in refused.stderr
    assert cli.ok("status", unindexed, "--json").json()["status"] == "awaiting_approval"  # nothing erased

    listed = {row["thread_id"]: row for row in cli.ok("threads", "--reindex", "--json").json()}
    assert set(listed) == {indexed, unindexed} and listed[unindexed]["status"] == "awaiting_approval"
    assert listed[unindexed]["user_id"] == "ann"
    cli.ok("forget", "--user", "ann", "--yes")
    assert "unknown thread" in cli.fails("status", unindexed).stderr
    assert cli.ok("threads", "--json").json() == []
