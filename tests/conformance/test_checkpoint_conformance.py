"""LangGraph's own checkpointer conformance suite (`langgraph-checkpoint-conformance`) against every
saver this project configures, opened as the application opens them (`open_checkpointer`: the
project's subclasses and serializer) on real servers: PostgreSQL, Redis, and Redis shallow.

Each report is compared in full: the capabilities the suite detects and, per capability, the exact
set of spec tests that fail, each with its reason. A regression fails here, and so does a release that
starts passing a test listed as failing: then take it off the list (and drop any workaround).
The tests after the reports show that no code path of the project depends on what still fails.
"""

from __future__ import annotations

import ast
import asyncio
import runpy
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport
from langgraph.checkpoint.conformance.spec import test_copy_thread as copy_thread_spec
from langgraph.checkpoint.conformance.spec import test_delete_for_runs as delete_for_runs_spec
from langgraph.checkpoint.conformance.spec import test_delete_thread as delete_thread_spec
from langgraph.checkpoint.conformance.spec import test_get_tuple as get_tuple_spec
from langgraph.checkpoint.conformance.spec import test_list as list_spec
from langgraph.checkpoint.conformance.spec import test_prune as prune_spec
from langgraph.checkpoint.conformance.spec import test_put as put_spec
from langgraph.checkpoint.conformance.spec import test_put_writes as put_writes_spec

from market_analyst.deps import open_checkpointer
from market_analyst.graph import build_graph
from market_analyst.persistence.checkpoints.redis_serde import StrictRedisSerializer
from market_analyst.persistence.checkpoints.sealing import SealingSerializer
from market_analyst.ports import ThreadQuery
from market_analyst.settings import Settings
from market_analyst.workflow.server_saver import ThreadedSaver, server_checkpointer
from tests.support import REPO
from tests.support.cli import Cli

# The spec tests of each capability the savers implement, by name.
SPEC = {
    "put": put_spec.ALL_PUT_TESTS,
    "put_writes": put_writes_spec.ALL_PUT_WRITES_TESTS,
    "get_tuple": get_tuple_spec.ALL_GET_TUPLE_TESTS,
    "list": list_spec.ALL_LIST_TESTS,
    "delete_thread": delete_thread_spec.ALL_DELETE_THREAD_TESTS,
    "prune": prune_spec.ALL_PRUNE_TESTS,
}
# Extended capabilities none of the three savers implements (so the wrapper does not offer them).
NOT_IMPLEMENTED = ("delete_for_runs", "copy_thread")

# Why each failing spec test fails, and which test here (or elsewhere) shows the project does not care.
ROOT_NAMESPACE = (
    "listing the root namespace (checkpoint_ns='') also returns subgraph checkpoints; the graph has no "
    "subgraph, so every checkpoint is in the root namespace "
    "(test_the_graph_writes_only_root_namespace_checkpoints)"
)
BEFORE = (
    "`before` is ignored: the saver parses the checkpoint ID as a ULID and LangGraph's IDs are UUIDv6 "
    "(the cause reported in redis-developer/langgraph-redis#136); the project never passes `before` "
    "(test_the_project_never_asks_a_saver_for_before_filter_or_prune)"
)
CUSTOM_FILTER = (
    "`filter` takes only source, step, thread_id and run_id ('Unsupported filter key: score'); the "
    "project never passes `filter` (test_the_project_never_asks_a_saver_for_before_filter_or_prune)"
)
PRUNE_EMPTY = (
    "prune([]) raises ValueError instead of doing nothing; the project never calls a saver's prune "
    "(test_the_project_never_asks_a_saver_for_before_filter_or_prune)"
)
NO_HISTORY = (
    "by design it keeps only each thread's latest checkpoint, without a parent: `history` and `fork` "
    "refuse on it (test_operations.py::test_shallow_redis_says_it_keeps_no_history) and the approval "
    "cycle needs only the latest (test_shallow_redis_revises_resumes_and_approves)"
)

REDIS_FAILURES: dict[str, dict[str, str]] = {
    "list": {
        "test_list_by_namespace": ROOT_NAMESPACE,
        "test_list_multiple_namespaces": ROOT_NAMESPACE,
        "test_list_metadata_custom_keys": CUSTOM_FILTER,
        "test_list_before": BEFORE,
        "test_list_limit_plus_before": BEFORE,
    },
    # Pruning itself keeps the latest checkpoint of each namespace; the check lists the root namespace.
    "prune": {
        "test_prune_keep_latest_across_namespaces": ROOT_NAMESPACE,
        "test_prune_empty_list_noop": PRUNE_EMPTY,
    },
}
SHALLOW_FAILURES: dict[str, dict[str, str]] = {
    "put": {
        "test_put_multiple_checkpoints_same_thread": NO_HISTORY,
        "test_put_parent_config": NO_HISTORY,
        "test_put_incremental_channel_update": NO_HISTORY,  # reads the first checkpoint back
    },
    "get_tuple": {
        "test_get_tuple_specific_checkpoint_id": NO_HISTORY,
        "test_get_tuple_parent_config": NO_HISTORY,
        "test_get_tuple_nonexistent_checkpoint_id": NO_HISTORY,  # any checkpoint ID gets the latest
    },
    "list": {
        **{
            name: NO_HISTORY  # each expects four checkpoints of one thread
            for name in (
                "test_list_all",
                "test_list_by_thread",
                "test_list_ordering",
                "test_list_metadata_filter_single_key",
                "test_list_metadata_filter_step",
                "test_list_limit",
                "test_list_combined_thread_and_filter",
            )
        },
        "test_list_before": BEFORE,
        "test_list_limit_plus_before": BEFORE,
        "test_list_by_namespace": ROOT_NAMESPACE,
        "test_list_multiple_namespaces": ROOT_NAMESPACE,
        "test_list_metadata_custom_keys": CUSTOM_FILTER,
    },
    "prune": REDIS_FAILURES["prune"],
}
EXPECTED_FAILURES: dict[str, dict[str, dict[str, str]]] = {
    "postgres": {},
    "redis": REDIS_FAILURES,
    "redis-shallow": SHALLOW_FAILURES,
}
SAVER_CLASSES = {
    "postgres": "SealedPostgresSaver",
    "redis": "FencedRedisSaver",
    "redis-shallow": "FencedShallowRedisSaver",
}


def run_suite(name: str, saver: BaseCheckpointSaver[Any]) -> CapabilityReport:
    """The suite's report on `saver`, driven through `ThreadedSaver` (the async methods LangGraph's
    server calls, as `server_saver` gives them to it)."""

    @checkpointer_test(name=name)
    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        yield ThreadedSaver(saver)

    return asyncio.run(validate(factory))


def failing(report: CapabilityReport, capability: str) -> set[str]:
    """The names of the spec tests that failed (each failure reads 'test_name: message')."""
    return {failure.split(":", 1)[0] for failure in report.results[capability].failures}


def assert_report(
    report: CapabilityReport, expected: dict[str, dict[str, str]], spec: dict[str, Any] = SPEC
) -> None:
    """Every implemented capability (`spec`'s) ran with exactly the `expected` failures; the others
    were skipped."""
    summary = {cap: sorted(failing(report, cap)) for cap in spec}
    for capability, tests in spec.items():
        result = report.results[capability]
        names = {test.__name__ for test in tests}
        wanted = set(expected.get(capability, {}))
        assert wanted <= names, f"{capability}: the suite has no {sorted(wanted - names)}"
        assert result.detected, f"{capability} was not detected"
        assert failing(report, capability) == wanted, f"{capability}: {summary}"
        assert (result.tests_passed, result.tests_failed) == (len(names) - len(wanted), len(wanted))
        assert result.passed is (not wanted)
    for capability in set(NOT_IMPLEMENTED) - set(spec):
        assert not report.results[capability].detected
    assert set(report.results) == set(SPEC) | set(NOT_IMPLEMENTED)


def _settings(tmp_path: Path, **environ: str) -> Settings:
    return Settings.load(environ={"MA_DATA_DIR": str(tmp_path / "data"), **environ}, dotenv=None)


# The server's adapter offers the two extended capabilities whatever the saver has: `copy_thread` by
# replaying the thread's checkpoints, `delete_for_runs` by refusing. The spec tests run on both.
SERVER_SPEC = SPEC | {
    "delete_for_runs": delete_for_runs_spec.ALL_DELETE_FOR_RUNS_TESTS,
    "copy_thread": copy_thread_spec.ALL_COPY_THREAD_TESTS,
}
NO_ROLLBACK = (
    "the savers cannot delete one run's checkpoints; the server says so as it starts, and a run "
    "cancelled with multitask_strategy='rollback' fails instead of rolling back (docs/langgraph-server.md)"
)
COPY_FALLBACK = (
    "the adapter's own replay copies the checkpoints under the new thread but keeps the source's "
    "thread_id in their metadata; a copy is an operator's repair and publishes nothing "
    "(test_langgraph_attacks.py::test_a_fork_or_a_copy_of_a_published_thread_publishes_nothing_more)"
)
SERVER_FAILURES = {
    "delete_for_runs": {
        test.__name__: NO_ROLLBACK for test in delete_for_runs_spec.ALL_DELETE_FOR_RUNS_TESTS
    },
    "copy_thread": {"test_copy_thread_preserves_metadata": COPY_FALLBACK},
}


def _backend_settings(request: pytest.FixtureRequest, name: str, tmp_path: Path) -> Settings:
    if name == "postgres":
        return _settings(tmp_path, POSTGRES_URL=request.getfixturevalue("postgres_url"))
    url = request.getfixturevalue("own_redis")  # the suite writes threads no index lists
    shallow = "true" if name == "redis-shallow" else "false"
    return _settings(tmp_path, MA_CHECKPOINTER="redis", REDIS_URL=url, MA_REDIS_SHALLOW=shallow)


@pytest.fixture
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The saver the application opens for the backend named by the test's parameter."""
    with open_checkpointer(_backend_settings(request, request.param, tmp_path)) as backend:
        yield backend.saver


@pytest.mark.parametrize("opened", list(EXPECTED_FAILURES), indirect=True)
def test_the_suite_passes_all_but_the_listed_spec_tests(opened: Any, request: pytest.FixtureRequest):
    name = request.node.callspec.params["opened"]
    assert type(opened).__name__ == SAVER_CLASSES[name]
    assert isinstance(opened.serde, SealingSerializer)  # every value sealed under its thread's key
    if name != "postgres":
        assert isinstance(opened.serde.inner, StrictRedisSerializer)
    for method in NOT_IMPLEMENTED:  # a saver that gains one should be offered to the suite
        assert getattr(type(opened), method) is getattr(BaseCheckpointSaver, method), method
    assert_report(run_suite(name, opened), EXPECTED_FAILURES[name])


@pytest.mark.parametrize("name", ["postgres", "redis"])
def test_the_suite_passes_on_the_saver_as_langgraphs_server_builds_it(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`langgraph.json`'s checkpointer (graphs/checkpointer.py), entered as the server enters it and
    behind the server's own adapter: the same report as the saver alone, and the thread index and
    the seal at work (the suite's threads are listed, their values sealed)."""
    for name_, value in {"REDIS_URI": "redis://unused", "DATABASE_URI": "postgres://unused"}.items():
        monkeypatch.setenv(name_, value)  # what langgraph_api's configuration asks for at import
    from langgraph_api._checkpointer._adapter import CheckpointerCapabilities, _CustomCheckpointerAdapter

    settings = _backend_settings(request, name, tmp_path)
    factory_of = runpy.run_path(str(REPO / "graphs" / "checkpointer.py"))["checkpointer"]
    assert factory_of is server_checkpointer
    seen: list[Any] = []

    @checkpointer_test(name=f"server {name}")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        async with factory_of(settings) as saver:
            seen.append(saver)
            yield _CustomCheckpointerAdapter(saver, CheckpointerCapabilities.from_type(type(saver)))

    report = asyncio.run(validate(factory))
    # The adapter keeps to the namespace a listing asks for, which the Redis saver alone does not.
    expected = {
        capability: {test: why for test, why in tests.items() if why is not ROOT_NAMESPACE}
        for capability, tests in EXPECTED_FAILURES[name].items()
    }
    assert_report(report, expected | SERVER_FAILURES, SERVER_SPEC)
    assert type(seen[0].inner).__name__ == SAVER_CLASSES[name]
    assert isinstance(seen[0].inner.serde, SealingSerializer)
    with open_checkpointer(settings) as backend:
        rows, total = backend.index.query(ThreadQuery(limit=10_000))
        assert total > 0
        if name == "postgres":  # a database of this test's own (the Redis is the module's)
            assert set(backend.thread_ids()) <= {row.thread_id for row in rows}


def test_the_upstream_shallow_saver_still_returns_earlier_checkpoints_writes(tmp_path: Path, own_redis: str):
    """What `FencedShallowRedisSaver._load_pending_writes` fixes: upstream's shallow saver gives the
    latest checkpoint the pending writes of every earlier one. When this starts passing, upstream
    fixed it: remove the override."""
    from langgraph.checkpoint.redis.shallow import ShallowRedisSaver

    settings = _settings(tmp_path, MA_CHECKPOINTER="redis", REDIS_URL=own_redis, MA_REDIS_SHALLOW="true")
    with open_checkpointer(settings) as backend:  # the same server, client and serializer
        upstream = ShallowRedisSaver(redis_client=backend.client)
        upstream.serde = StrictRedisSerializer()
        upstream.setup()
        fixed = {"put_writes": {"test_put_writes_cleared_on_next_checkpoint": "fixed in the subclass"}}
        assert_report(run_suite("ShallowRedisSaver (upstream)", upstream), SHALLOW_FAILURES | fixed)


# --- What fails does not matter to the project ---------------------------------------------------

SHALLOW = {"MA_REDIS_SHALLOW": "true"}


def _status(cli: Cli, thread: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return cli.ok("status", thread, "--json", extra_env=env).json()


@pytest.mark.parametrize("cli", ["redis"], indirect=True)
def test_shallow_redis_revises_resumes_and_approves(cli: Cli):
    """On the shallow saver each command reads the latest checkpoint and only its own writes. With
    upstream's reads, the revise decision of the first gate was also read as the answer to the
    second: the thread did not stop there, and `resume` applied it to the new draft and failed."""
    thread = cli.ok("analyze", "NVDA", "--json", extra_env=SHALLOW).json()["thread_id"]
    cli.ok("revise", thread, "--feedback", "more on margins", extra_env=SHALLOW)
    for _ in range(2):  # before and after a resume at the gate, which has nothing to do there
        status = _status(cli, thread, SHALLOW)
        assert (status["status"], status["draft"]["revision"]) == ("awaiting_approval", 2)
        cli.ok("resume", thread, extra_env=SHALLOW)
    cli.ok("approve", thread, "--user", "rev", extra_env=SHALLOW)
    assert _status(cli, thread, SHALLOW)["status"] == "published"


@pytest.mark.parametrize("cli", ["redis"], indirect=True)
def test_the_graph_writes_only_root_namespace_checkpoints(cli: Cli):
    """No node is a subgraph, so a whole run (a revise included) leaves checkpoints in the root
    namespace only, and `history` (which lists the root namespace) shows every one of them."""
    assert list(build_graph().get_subgraphs(recurse=True)) == []
    thread = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]
    cli.ok("revise", thread, "--feedback", "more on margins")
    cli.ok("approve", thread, "--user", "rev")
    history = cli.ok("history", thread, "--json").json()
    with open_checkpointer(Settings.load(environ=cli.env, dotenv=None)) as backend:
        saved = list(backend.saver.list({"configurable": {"thread_id": thread}}))  # every namespace
    assert {t.config["configurable"]["checkpoint_ns"] for t in saved} == {""}
    newest_first = [t.config["configurable"]["checkpoint_id"] for t in saved]
    assert [entry["checkpoint_id"] for entry in history] == newest_first[::-1]


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    return (n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute))


def test_the_project_never_asks_a_saver_for_before_filter_or_prune():
    """LangGraph lists checkpoints for `get_state_history`, which the project calls with a limit at
    most; the project's own `list` (what `forget --including-said-by` reads of a thread) passes the
    thread's config alone, and it calls no saver's `prune`: `before`, custom `filter` keys and
    `prune` never reach a saver."""
    history_keywords: set[str | None] = set()
    saver_methods: set[str] = set()
    list_calls: list[tuple[int, set[str | None]]] = []
    for path in sorted((REPO / "src" / "market_analyst").rglob("*.py")):
        for call in _calls(ast.parse(path.read_text(), str(path))):
            attribute = call.func
            assert isinstance(attribute, ast.Attribute)
            if attribute.attr in ("get_state_history", "aget_state_history"):
                history_keywords |= {keyword.arg for keyword in call.keywords}
            receiver = attribute.value
            if isinstance(receiver, ast.Attribute | ast.Name) and getattr(
                receiver, "attr", getattr(receiver, "id", None)
            ) in ("saver", "checkpointer"):
                saver_methods.add(attribute.attr)
                if attribute.attr == "list":
                    list_calls.append((len(call.args), {keyword.arg for keyword in call.keywords}))
    assert history_keywords == {"limit"}
    assert list_calls == [(1, set())], list_calls  # a thread's config: every checkpoint, root namespace
    # `records encrypt` on Redis decodes stored values with the saver's own helpers, so they come back
    # as a read brings them back (`RedisBackend.seal_thread`).
    redis_decoding = {"_decode_blob", "_deserialize_channel_values"}
    assert saver_methods == {"setup", "get_tuple", "list", "delete_thread", *redis_decoding}, saver_methods
