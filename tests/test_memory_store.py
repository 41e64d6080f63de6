"""The memory store on a real Qdrant Edge shard: written, recalled by owner, listed, replaced,
forgotten, pruned; and several real processes writing to one shard at once."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from market_analyst.errors import UserError
from market_analyst.persistence.memory.edge import EdgeMemoryStore
from market_analyst.persistence.memory.embedder import WordLlamaEmbedder
from market_analyst.state import Memory, memory_id
from tests.support import REPO

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
def store(tmp_path: Path, embedder: WordLlamaEmbedder) -> EdgeMemoryStore:
    return EdgeMemoryStore(tmp_path / "memories", embedder=lambda: embedder)


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


def test_written_memories_are_recalled_for_their_owner_only(store: EdgeMemoryStore) -> None:
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


def test_the_same_id_written_twice_is_one_memory(store: EdgeMemoryStore) -> None:
    store.write(ANN)
    store.write(ANN)
    assert len(store.list("ann")) == 3
    assert len(store.all_points()) == 3


def test_an_owner_without_memories_loads_no_model(tmp_path: Path, store: EdgeMemoryStore) -> None:
    store.write([note("bob", "remembered", "Prefer dividend payers")])
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from market_analyst.persistence.memory.edge import EdgeMemoryStore\n"
        "from market_analyst.persistence.memory.embedder import WordLlamaEmbedder\n"
        f"s = EdgeMemoryStore(Path({str(store.path)!r}), embedder=WordLlamaEmbedder)\n"
        "assert s.recall('ann', 'anything?') == [] and not s.has_memories('ann')\n"
        "assert 'wordllama' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)\n"
        "assert s.recall('bob', 'dividends')\n"
        "assert 'wordllama' in sys.modules\n"  # the check above can fail: recall for bob loads it
        "print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_memory_text_is_checked(store: EdgeMemoryStore) -> None:
    for bad in ("", "   ", "x" * 1001, "line\nbreak", "bell\x07"):
        with pytest.raises(UserError):
            note("ann", "remembered", bad)
