"""The memory store on a real Qdrant Edge shard: written, recalled by owner, listed, replaced,
forgotten, pruned; and several real processes writing to one shard at once."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from market_analyst.errors import UserError
from market_analyst.persistence.memory.edge import EdgeMemoryStore
from market_analyst.persistence.memory.embedder import WordLlamaEmbedder
from market_analyst.persistence.memory.server import QdrantMemoryStore
from market_analyst.state import Memory, memory_id
from tests.support import REPO
from tests.support.embeddings_server import EmbeddingsServer

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def note(
    owner: str, kind: str, text: str, *, ticker: str | None = None, days_ago: float = 1, thread: str = "t1"
) -> Memory:
    return Memory(
        id=memory_id(kind, owner, thread, text),
        owner=owner,
        kind=kind,  # type: ignore[arg-type]
        text=text,
        ticker=ticker,
        created_at=NOW - timedelta(days=days_ago),
        thread_id=thread,
        said_by="rita",
        verified=True,
    )


@pytest.fixture(scope="module")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()  # one model load for the module


@pytest.fixture
def edge_store(tmp_path: Path, embedder: WordLlamaEmbedder) -> EdgeMemoryStore:
    return EdgeMemoryStore(tmp_path / "memories", embedder=lambda: embedder)


def _local_mode_client(path: Path) -> Any:
    from qdrant_client import QdrantClient

    return QdrantClient(path=str(path))


@pytest.fixture(params=["edge", "qdrant-client"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Opens the Edge store, or the server twin's code against `qdrant-client` local mode (the same
    client calls a server gets; no Qdrant server can run here), in this test's folder."""

    def make(embedder: WordLlamaEmbedder) -> Any:
        if request.param == "edge":
            return EdgeMemoryStore(tmp_path / "memories", embedder=lambda: embedder)
        folder = tmp_path / "qdrant-local"
        return QdrantMemoryStore(
            lambda: _local_mode_client(folder), embedder=lambda: embedder, location=str(folder)
        )

    return make


@pytest.fixture
def store(open_store: Any, embedder: WordLlamaEmbedder) -> Any:
    return open_store(embedder)


ANN = [
    note(
        "ann",
        "feedback",
        "Say more about the drawdown: a 40% fall is not a footnote",
        ticker="NVDA",
        days_ago=30,
    ),
    note("ann", "rejection", "Figures are stale, rerun with this week's prices", ticker="MSFT", days_ago=20),
    note(
        "ann", "approval_note", "Fine, but watch supplier concentration at TSMC", ticker="NVDA", days_ago=10
    ),
]


def test_written_memories_are_recalled_for_their_owner_only(store: Any) -> None:
    bob = note("bob", "feedback", "Supplier concentration worries me too", ticker="NVDA")
    store.write([*ANN, bob])
    found = store.recall("ann", "what did I say about suppliers?", ticker="NVDA", now=NOW)
    assert found[0].text == ANN[2].text
    assert all(memory.owner == "ann" for memory in found)
    assert [m.text for m in store.recall("bob", "suppliers", now=NOW)] == [bob.text]
    assert store.recall("cy", "suppliers", now=NOW) == []
    assert store.has_memories("ann") and not store.has_memories("cy")
    listed = store.list("ann")
    assert [m.id for m in listed] == [m.id for m in sorted(ANN, key=lambda m: m.created_at, reverse=True)]
    assert listed[0] == ANN[2]  # every field comes back as written


def test_the_same_id_written_twice_is_one_memory(store: Any) -> None:
    store.write(ANN)
    store.write(ANN)
    assert len(store.list("ann")) == 3
    assert len(store.all_points()) == 3


def test_an_owner_without_memories_loads_no_model(tmp_path: Path, edge_store: Any) -> None:
    edge_store.write([note("bob", "remembered", "Prefer dividend payers")])
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from market_analyst.persistence.memory.edge import EdgeMemoryStore\n"
        "from market_analyst.persistence.memory.embedder import WordLlamaEmbedder\n"
        f"s = EdgeMemoryStore(Path({str(edge_store.path)!r}), embedder=WordLlamaEmbedder)\n"
        "assert s.recall('ann', 'anything?') == [] and not s.has_memories('ann')\n"
        "assert 'wordllama' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)\n"
        "assert s.recall('bob', 'dividends')\n"
        "assert 'wordllama' in sys.modules\n"  # the check above can fail: recall for bob loads it
        "print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_memory_text_is_checked() -> None:
    for bad in (
        "",
        "   ",
        "x" * 1001,
        "line\nbreak",
        "bell\x07",
        "line\u2028separator",
        "zero\u200bwidth",
        "a lone\u200djoiner",
        "\U0001f469\u200d joined to nothing",
        "pay\u202eyap",
    ):
        with pytest.raises(UserError):
            note("ann", "remembered", bad)
    # An emoji newer than this Python's Unicode tables, a private-use character, or an emoji sequence
    # joined by U+200D (a technologist, a family, a rainbow flag) is data.
    for good in (
        "watch the \U0001fae9 supply",
        "logo \ue000 mark",
        "ask the \U0001f469\u200d\U0001f4bb team",
        "\U0001f468\u200d\U0001f469\u200d\U0001f467 fund",
        "\U0001f3f3\ufe0f\u200d\U0001f308 index",
    ):
        assert note("ann", "remembered", good).text == good


def test_what_the_workflow_records_always_makes_a_valid_memory() -> None:
    """A note or a report's text with anything in it becomes a memory's text that passes the check,
    so writing the memory can never stop a decision or a publication that is already recorded."""
    from market_analyst.state import check_memory_text, memory_text

    for raw in ("fine\x07 but\nwatch \u2028 suppliers\u200b \U0001fae9", "x" * 5000, "\ue000 ok"):
        assert check_memory_text(memory_text(raw)) == memory_text(raw)
    # A text over the limit is cut at a word, and the cut is marked; an emoji sequence stays whole.
    long = memory_text("the margin story " * 100)
    assert len(long) <= 1000 and long.endswith("\u2026")
    assert ("the margin story " * 100).startswith(long[:-1] + " ")  # whole words, cut between two
    assert memory_text("x" * 5000) == "x" * 999 + "\u2026"
    assert memory_text("ask \U0001f469\u200d\U0001f4bb now") == "ask \U0001f469\u200d\U0001f4bb now"
    assert memory_text("short note") == "short note"  # no mark where nothing was cut


def test_replaced_memories_are_kept_but_never_recalled(store: Any) -> None:
    store.write(ANN)
    old = ANN[2]
    new = note(
        "ann",
        "remembered",
        "Watch foundry concentration: one fab makes every chip",
        ticker="NVDA",
        days_ago=0,
    )
    store.replace("ann", old.id, new)
    recalled = [
        m.id for m in store.recall("ann", "supplier concentration TSMC", ticker="NVDA", limit=10, now=NOW)
    ]
    assert new.id in recalled and old.id not in recalled
    assert old.id not in [m.id for m in store.list("ann")]
    everything = {m.id: m for m in store.list("ann", include_superseded=True)}
    assert everything[old.id].superseded and everything[new.id].replaces == old.id
    with pytest.raises(UserError, match="no memory"):
        store.replace("bob", ANN[0].id, note("bob", "remembered", "not mine to replace"))


def test_a_chain_of_replacements_keeps_one_current_memory_and_forgetting_it_brings_back_the_one_before(
    store: Any,
) -> None:
    first = note("ann", "remembered", "Watch foundry concentration", ticker="NVDA", days_ago=3)
    second = note(
        "ann", "remembered", "Watch foundry concentration: one fab makes them", ticker="NVDA", days_ago=2
    )
    third = note(
        "ann", "remembered", "Foundry concentration eased: a second fab opened", ticker="NVDA", days_ago=1
    )
    store.write([first])
    store.replace("ann", first.id, second)
    with pytest.raises(UserError, match=f"already replaced by {second.id}: give --replaces {second.id}"):
        store.replace("ann", first.id, third)  # a second "current" version of the first: refused
    assert [m.id for m in store.list("ann")] == [second.id]  # nothing was written
    store.replace("ann", second.id, third)
    assert store.current_of("ann", first.id) == third.id and store.current_of("ann", third.id) is None
    with pytest.raises(UserError, match=f"give --replaces {third.id}"):
        store.replace("ann", first.id, note("ann", "remembered", "yet another"))

    assert store.to_revive("ann", third.id) == store.get("ann", second.id)
    assert store.to_revive("ann", second.id) is None  # not the current end: forgetting it revives none
    assert store.forget("ann", third.id)
    assert [m.id for m in store.list("ann")] == [second.id]  # the one before is current again
    assert second.id in [m.id for m in store.recall("ann", "foundry concentration fab", now=NOW)]
    assert store.forget("ann", second.id)
    assert [m.id for m in store.list("ann")] == [first.id]
    assert store.forget("ann", first.id) and store.list("ann", include_superseded=True) == []


def test_forget_one_and_prune_by_age(store: Any) -> None:
    ancient = note("bob", "feedback", "Two years ago: explain the margin squeeze", days_ago=800)
    store.write([*ANN, ancient])
    assert store.get("bob", ANN[0].id) is None  # another owner's ID reads as absent
    assert not store.forget("bob", ANN[0].id)
    assert store.forget("ann", ANN[0].id) and store.get("ann", ANN[0].id) is None
    assert not store.forget("ann", ANN[0].id)
    assert store.count_before(NOW - timedelta(days=365)) == 1
    assert store.prune(NOW - timedelta(days=365)) == 1
    assert {p["payload"]["text"] for p in store.all_points()} == {ANN[1].text, ANN[2].text}


def _dbsf(*lists: list[tuple[str, float]]) -> dict[str, float]:
    """Distribution-based score fusion as Qdrant defines it: each list's scores mapped linearly so that
    its mean - 3 sd and mean + 3 sd become 0 and 1, summed over the lists a point is in."""
    import statistics

    scores: dict[str, float] = {}
    for ranked in lists:
        values = [score for _, score in ranked]
        mean, sd = statistics.fmean(values), statistics.stdev(values)  # the sample deviation (n - 1)
        low, high = mean - 3 * sd, mean + 3 * sd
        for key, score in ranked:
            scores[key] = scores.get(key, 0.0) + (score - low) / (high - low)
    return scores


def test_hybrid_is_distribution_based_score_fusion_of_the_two_retrievers(store: Any) -> None:
    """Pins what Edge 0.9.0 does with two prefetches and `Fusion.Dbsf`: a change of engine version
    that fused differently (or ignored a prefetch's owner filter) fails here."""
    from market_analyst.persistence.memory import search

    store.write([*ANN, note("ann", "feedback", "Compare the valuation with AMD and Intel", ticker="NVDA")])
    store.write([note("bob", "feedback", "Suppliers and foundry concentration, again", ticker="NVDA")])
    query = "worried about the foundry suppliers and the valuation"
    dense = [(m.id, s) for m, s in store.ranked("ann", query, mode="dense", limit=search.PREFETCH_LIMIT)]
    bm25 = [(m.id, s) for m, s in store.ranked("ann", query, mode="bm25", limit=search.PREFETCH_LIMIT)]
    assert [k for k, _ in dense] != [k for k, _ in bm25]  # the retrievers disagree: fusion has work
    assert len(dense) > 1 and len(bm25) > 1  # so both lists have a spread to normalise by
    hybrid = store.ranked("ann", query, mode="hybrid", limit=10)
    expected = _dbsf(dense, bm25)
    assert {m.id for m, _ in hybrid} == set(expected)
    for memory, score in hybrid:
        assert score == pytest.approx(expected[memory.id], rel=1e-5)
    assert [s for _, s in hybrid] == sorted((s for _, s in hybrid), reverse=True)


def test_recency_and_ticker_rescore_the_fused_list(store: Any) -> None:
    """`hybrid_recency` is Edge's `Formula` over the fused scores: checked against the same formula
    computed here, so a formula the engine ignored (or evaluated otherwise) fails."""
    import math

    from market_analyst.persistence.memory import search

    fresh = note(
        "ann", "feedback", "Explain the drawdown risk in plain words", ticker="NVDA", days_ago=2, thread="a"
    )
    stale = note(
        "ann", "feedback", "Explain the drawdown risk in plain words", ticker="MSFT", days_ago=400, thread="b"
    )
    store.write([fresh, stale])
    query = "drawdown risk"
    fused = dict((m.id, s) for m, s in store.ranked("ann", query, mode="hybrid", limit=10))
    rescored = store.ranked("ann", query, mode="hybrid_recency", ticker="NVDA", limit=10, now=NOW)
    assert [m.id for m, _ in rescored] == [fresh.id, stale.id]
    lam = math.log(search.RECENCY_MIDPOINT) / (search.RECENCY_SCALE_DAYS * 86400.0)
    for memory, score in rescored:
        age = (NOW - memory.created_at).total_seconds()
        recency = 1 - search.RECENCY_WEIGHT + search.RECENCY_WEIGHT * math.exp(lam * age)
        on_ticker = 1 + search.TICKER_BOOST * (memory.ticker == "NVDA")
        report = search.REPORT_WEIGHT if memory.kind == "report" else 1.0
        assert score == pytest.approx(fused[memory.id] * recency * on_ticker * report, rel=1e-4)
        assert score >= search.RELEVANCE_FLOOR


def test_report_memories_count_less_than_words_people_said(store: Any) -> None:
    """A report memory names its ticker and its figures: it counts `REPORT_WEIGHT` times, so it does
    not take the place of a note that matches as well."""
    from market_analyst.persistence.memory import search

    said = note("ann", "feedback", "Explain the drawdown risk in plain words", ticker="NVDA", thread="a")
    report = note("ann", "report", "Explain the drawdown risk in plain words", ticker="NVDA", thread="b")
    store.write([said, report])
    fused = dict((m.id, s) for m, s in store.ranked("ann", "drawdown risk", mode="hybrid", limit=10))
    assert fused[said.id] == pytest.approx(fused[report.id], rel=1e-4)  # the same text, the same match
    by_id = {m.id: s for m, s in store.ranked("ann", "drawdown risk", ticker="NVDA", limit=10, now=NOW)}
    assert by_id[report.id] == pytest.approx(by_id[said.id] * search.REPORT_WEIGHT, rel=1e-4)
    assert [m.id for m in store.recall("ann", "drawdown risk", ticker="NVDA", now=NOW)][0] == said.id


def test_a_memory_under_the_relevance_floor_is_not_recalled(store: Any) -> None:
    """The floor: an owner's one memory that shares no word with the question and is not about the
    run's ticker scores under `RELEVANCE_FLOOR` and is not recalled, so a run may recall nothing;
    the same memory about the ticker, or a question that shares its words, recalls it."""
    lone = note("ann", "remembered", "I prefer companies that pay dividends", ticker="MSFT", days_ago=30)
    store.write([lone])
    unrelated = "bitcoin on the balance sheet"
    # Found by meaning alone (no word in common): fused, one list's only member scores a half.
    [(found, fused)] = store.ranked("ann", unrelated, mode="hybrid", now=NOW)
    assert found.id == lone.id and fused <= 0.5 + 1e-6
    assert store.ranked("ann", unrelated, ticker="NVDA", now=NOW) == []
    assert store.recall("ann", unrelated, ticker="NVDA", now=NOW) == []
    assert [m.id for m in store.recall("ann", "dividends", ticker="NVDA", now=NOW)] == [lone.id]
    assert [m.id for m in store.recall("ann", unrelated, ticker="MSFT", now=NOW)] == [lone.id]
    # The baselines have no floor: they are what the floor is measured against.
    assert [m.id for m in store.recall("ann", unrelated, mode="dense", now=NOW)] == [lone.id]


def test_a_changed_embedder_is_refused_until_reindexed(open_store: Any, store: Any) -> None:
    store.write(ANN)
    other = open_store(WordLlamaEmbedder(dimension=64))
    with pytest.raises(UserError, match="memories reindex"):
        other.recall("ann", "suppliers", now=NOW)
    with pytest.raises(UserError, match="memories reindex"):
        other.write([note("ann", "remembered", "one more")])
    assert len(other.list("ann")) == 3  # reading what is stored needs no model
    assert other.reindex() == 3
    assert other.recall("ann", "supplier concentration", ticker="NVDA", now=NOW)[0].id == ANN[2].id
    with pytest.raises(UserError, match="memories reindex"):
        store.recall("ann", "suppliers", now=NOW)  # now the first embedder is the stranger


def test_budget_and_limit(store: Any) -> None:
    long = note("ann", "report", "NVDA report: " + "figures " * 110, ticker="NVDA", days_ago=0)  # ~900 chars
    store.write([*ANN, long])
    found = store.recall("ann", "NVDA report figures", ticker="NVDA", limit=5, budget_chars=200, now=NOW)
    assert found and long.id not in [m.id for m in found] and sum(len(m.text) for m in found) <= 200
    assert len(store.recall("ann", "NVDA", limit=2, now=NOW)) == 2


def test_an_owner_without_memories_opens_no_shard(
    edge_store: EdgeMemoryStore, embedder: WordLlamaEmbedder
) -> None:
    """Answered from the owners' markers: while another process holds the folder, an owner with no
    memory (never, or no longer) gets [] at once; one with memories waits for the folder."""
    from market_analyst.persistence.store_access import lock_file

    edge_store.write([note("bob", "remembered", "Prefer dividend payers"), *ANN])
    assert edge_store.forget_user("ann") == 3
    impatient = EdgeMemoryStore(edge_store.path, embedder=lambda: embedder, lock_wait_seconds=0.3)
    with lock_file(edge_store.path.with_name(f".{edge_store.path.name}.session.lock")):
        assert impatient.recall("ann", "anything?") == [] and not impatient.has_memories("ann")
        assert impatient.recall("cy", "anything?") == []
        with pytest.raises(UserError, match="in use by another process"):
            impatient.recall("bob", "dividends")
    assert [m.text for m in impatient.recall("bob", "dividends")] == ["Prefer dividend payers"]


def test_owner_markers_name_nobody_and_an_earlier_releases_are_rebuilt_under_the_key(
    edge_store: EdgeMemoryStore, embedder: WordLlamaEmbedder
) -> None:
    """A marker's name is a keyed hash: not the SHA-256 of the user ID someone could compute. Markers
    made under another key, or by an earlier release (plain SHA-256, no `KEYED` stamp), or missing,
    are trusted for nothing: the next opening rebuilds them from the shard, and recall misses no one
    meanwhile."""
    import hashlib
    import shutil

    edge_store.write([note("bob", "remembered", "Prefer dividend payers"), *ANN])
    folder = edge_store.path / "owners"
    keyed = {path.name for path in folder.iterdir()} - {"KEYED"}
    plain = {hashlib.sha256(owner.encode()).hexdigest()[:32] for owner in ("ann", "bob")}
    assert len(keyed) == 2 and not keyed & plain
    assert not edge_store._owners.may_have("cy") and edge_store._owners.may_have("bob")

    for path in folder.iterdir():  # as an earlier release left it
        path.unlink()
    for name in plain:
        (folder / name).touch()
    assert edge_store._owners.may_have("cy")  # nothing trusted: every owner perhaps
    assert [m.text for m in edge_store.recall("bob", "dividends")] == ["Prefer dividend payers"]
    assert {path.name for path in folder.iterdir()} == keyed | {"KEYED"}
    assert not edge_store._owners.may_have("cy")

    # A store whose markers were lost: they are rebuilt, no one's memories hidden.
    shutil.rmtree(folder)
    assert [m.text for m in edge_store.recall("bob", "dividends")] == ["Prefer dividend payers"]
    assert {path.name for path in folder.iterdir()} == keyed | {"KEYED"}

    stranger = EdgeMemoryStore(edge_store.path, embedder=lambda: embedder, marker_key=lambda: b"k" * 32)
    assert stranger._owners.may_have("cy") and stranger.has_memories("bob")  # rebuilt under its key
    assert not stranger._owners.may_have("cy") and not ({p.name for p in folder.iterdir()} & keyed)
    assert [m.text for m in edge_store.recall("bob", "dividends")] == ["Prefer dividend payers"]


def test_an_openai_compatible_embedder_is_the_second_implementation(
    tmp_path: Path, embedder: WordLlamaEmbedder
) -> None:
    from market_analyst.persistence.memory.embedder import OpenAIEmbedder

    server = EmbeddingsServer()
    try:
        remote = OpenAIEmbedder(
            model="text-embedding-3-small", dimension=64, api_key="sk-test", base_url=server.url
        )
        store = EdgeMemoryStore(tmp_path / "memories", embedder=lambda: remote)
        store.write(ANN)
        found = store.recall("ann", "supplier concentration TSMC", ticker="NVDA", now=NOW)
        assert found[0].id == ANN[2].id
        assert server.requests and all(r["path"] == "/v1/embeddings" for r in server.requests)
        assert {r["model"] for r in server.requests} == {"text-embedding-3-small"}
        assert {r["dimensions"] for r in server.requests} == {64}
        local = EdgeMemoryStore(tmp_path / "memories", embedder=lambda: embedder)
        with pytest.raises(UserError, match="openai/text-embedding-3-small.*memories reindex"):
            local.recall("ann", "suppliers", now=NOW)
    finally:
        server.close()


def _as_an_earlier_release_left_it(store: EdgeMemoryStore) -> None:
    """The layout before the store was one folder: the shard itself as `memories/` (its embedder
    record inside, no manifest) and the owners' markers beside it in `.memories.owners`."""
    import shutil

    path = store.path
    parked = path.with_name("shard-moving")
    os.rename(store.shard_path, parked)
    os.rename(path / "owners", path.with_name(f".{path.name}.owners"))
    shutil.rmtree(path)
    os.rename(parked, path)
    (path / "manifest.json").unlink()


def test_a_store_an_earlier_release_left_is_moved_into_one_folder_and_recorded(
    edge_store: EdgeMemoryStore,
) -> None:
    edge_store.write([note("bob", "remembered", "Prefer dividend payers"), *ANN])
    _as_an_earlier_release_left_it(edge_store)
    assert (edge_store.path / "edge_config.json").is_file()
    assert len(edge_store.list("ann")) == 3 and len(edge_store.list("bob")) == 1
    assert (edge_store.shard_path / "edge_config.json").is_file()
    assert (edge_store.path / "owners").is_dir()
    assert not edge_store.path.with_name(".memories.owners").exists()
    report = edge_store.check()
    assert report["ok"] and report["memories"] == 4 and report["users"] == 2, report
    assert not edge_store.has_memories("cy")  # the markers came along, still trusted


def test_a_kill_in_the_middle_of_moving_an_earlier_store_in_is_finished_by_the_next_opening(
    edge_store: EdgeMemoryStore,
) -> None:
    """Killed after the shard was parked beside the folder, and again after the folder was made:
    each next opening goes on from there, and no memory is lost or taken for damage."""
    edge_store.write(ANN)
    _as_an_earlier_release_left_it(edge_store)
    parked = edge_store.path.with_name(f".{edge_store.path.name}.upgrading")
    (edge_store.path / "upgraded-from-unrecorded").touch()
    os.rename(edge_store.path, parked)  # killed here: no `memories/` at all
    assert len(edge_store.list("ann")) == 3
    assert edge_store.check()["ok"]


def test_a_shard_without_its_manifest_or_embedder_record_is_refused_not_empty(
    edge_store: EdgeMemoryStore,
) -> None:
    from market_analyst.persistence.memory.manifest import StoreDamaged

    edge_store.write(ANN)
    manifest = edge_store.shard_path / "manifest.json"
    saved = manifest.read_bytes()
    manifest.unlink()
    with pytest.raises(StoreDamaged, match="memories check"):
        edge_store.list("ann")
    with pytest.raises(StoreDamaged):
        edge_store.write([note("ann", "remembered", "one more")])
    manifest.write_bytes(saved)
    (edge_store.shard_path / "memory_embedder.json").unlink()
    with pytest.raises(StoreDamaged, match="embedder"):
        edge_store.recall("ann", "suppliers", now=NOW)
    assert edge_store.restore()["restored"] and len(edge_store.list("ann")) == 3
    import shutil

    shutil.rmtree(edge_store.shard_path)  # the shard gone, its copy and markers left: not an empty store
    with pytest.raises(StoreDamaged, match="missing"):
        edge_store.list("ann")
    assert edge_store.restore()["restored"] and len(edge_store.list("ann")) == 3
