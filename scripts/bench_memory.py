"""Memory-store benches on Qdrant Edge, written and read through the application's own store.

- `recall`: recall latency (hybrid dense + BM25, fused, rescored for recency) at each collection
  size, for owners who each hold 1% of it: inside one open shard (the engine's query, what a
  long-lived process pays) and through the store as a command calls it (embed the query, open the
  shard, query, close); and the bytes on disk per memory at that size.
- `writes`: the cost of writing a memory, one at a time (embed, open, upsert, close) and in batches
  of 100; and the bytes on disk per memory (allocated blocks: Edge preallocates its log sparsely).
- `fresh`: a new process recalls for an owner with 1,000 memories against one with none (who costs
  no model load): the store's share of `analyze` from process start to the gate.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from market_analyst.persistence.memory.edge import EdgeMemoryStore
from market_analyst.persistence.memory.embedder import WordLlamaEmbedder
from market_analyst.persistence.memory.search import Recall, edge_query, owner_filter
from market_analyst.state import Memory, memory_id

TICKERS = ("NVDA", "MSFT", "AAPL", "AMZN", "GOOG", "META", "TSLA", None)
KINDS = ("feedback", "rejection", "approval_note", "report", "remembered")
SUBJECTS = (
    "the drawdown",
    "supplier concentration",
    "foundry dependence",
    "the valuation",
    "margins",
    "the dividend",
    "free cash flow",
    "guidance",
    "the peer comparison",
    "volatility",
    "the data's age",
    "customer concentration",
    "export controls",
    "inventory",
    "the buyback",
    "debt maturities",
)
ASKS = ("Say more about", "Explain", "Watch", "Figures are stale on", "Fine, but check", "Compare")
QUERIES = (
    "what did I worry about before?",
    "anything about suppliers last time?",
    "was the data stale?",
    "what did I say about risk?",
    "notes on valuation",
    "concerns about concentration",
)
BASE = datetime(2026, 6, 1, tzinfo=UTC)
_EMBEDDER = WordLlamaEmbedder()


def owner(i: int) -> str:
    return f"user-{i:04d}"


def _memories(start: int, count: int, owners: int, rng: random.Random) -> list[Memory]:
    out = []
    for i in range(start, start + count):
        text = f"{rng.choice(ASKS)} {rng.choice(SUBJECTS)} ({i}); {rng.choice(SUBJECTS)} too"
        who = owner(i % owners)
        out.append(
            Memory(
                id=memory_id("bench", who, str(i)),
                owner=who,
                kind=KINDS[i % len(KINDS)],  # type: ignore[arg-type]
                text=text,
                ticker=TICKERS[i % len(TICKERS)],
                created_at=BASE - timedelta(days=rng.randrange(720)),
                thread_id=f"thread-{i // 3}",
                said_by="reviewer",
            )
        )
    return out


def seeded(path: Path, n: int, owners: int) -> float:
    """Write `n` memories for `owners` owners through the store, 5,000 a call; seconds taken."""
    rng = random.Random(n)
    store = EdgeMemoryStore(path, embedder=lambda: _EMBEDDER)
    started = time.perf_counter()
    for start in range(0, n, 5_000):
        store.write(_memories(start, min(5_000, n - start), owners, rng))
    return time.perf_counter() - started


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def recall(sizes: list[int]) -> bool:
    """Recall p50/p99 at each size (target: p50 under 20 ms at 100,000 inside an open shard)."""
    from qdrant_edge import Bm25, EdgeShard

    met = True
    for n in sizes:
        owners = max(1, n // 100)
        with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
            path = Path(tmp) / "memories"
            took = seeded(path, n, owners)
            rng = random.Random(7)
            asks = [(owner(rng.randrange(owners)), rng.choice(QUERIES)) for _ in range(300)]
            bm25 = Bm25()
            vectors = {q: _EMBEDDER.embed([q])[0] for q in QUERIES}
            shard = EdgeShard.load(str(EdgeMemoryStore(path, embedder=lambda: _EMBEDDER).shard_path))
            try:
                inside = []
                for i, (who, q) in enumerate(asks):
                    asked = Recall(
                        owner=who, query=q, limit=20, ticker="NVDA", mode="hybrid_recency", now=BASE
                    )
                    request = edge_query(asked, dense=vectors[q], sparse=bm25.embed_query(q))
                    t0 = time.perf_counter()
                    found = shard.query(request)
                    if i >= 20:  # after a warm-up
                        inside.append(time.perf_counter() - t0)
                    assert all((p.payload or {}).get("owner") == who for p in found)
                from qdrant_edge import CountRequest

                assert shard.count(CountRequest(filter=owner_filter(owner(0)), exact=True)) == n // owners
            finally:
                shard.close()
            store = EdgeMemoryStore(path, embedder=lambda: _EMBEDDER)
            through = []
            for who, q in asks[:100]:
                t0 = time.perf_counter()
                store.recall(who, q, ticker="NVDA", now=BASE)
                through.append(time.perf_counter() - t0)
            print(
                f"  {n:>7,} memories ({n // owners} per owner, seeded in {took:.1f} s): "
                f"open shard p50 {ms(statistics.median(inside))} p99 {ms(_pct(inside, 0.99))}; "
                f"through the store (embed, open, query, close) p50 {ms(statistics.median(through))} "
                f"p99 {ms(_pct(through, 0.99))}; {_disk_bytes(path) / n:,.0f} bytes on disk a memory"
            )
            if n >= 100_000:
                ok = statistics.median(inside) < 0.020
                print(f"  target p50 under 20 ms at {n:,} (open shard): {'met' if ok else 'MISSED'}")
                met = met and ok
    return met


def writes(n: int) -> bool:
    """Write cost per memory, single and batched, and bytes on disk per memory."""
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        path = Path(tmp) / "memories"
        store = EdgeMemoryStore(path, embedder=lambda: _EMBEDDER)
        rng = random.Random(3)
        single = []
        for memory in _memories(0, 100 if n >= 1_000 else 20, 10, rng):
            t0 = time.perf_counter()
            store.write([memory])
            single.append(time.perf_counter() - t0)
        batches = []
        for start in range(100, 100 + max(n, 100), 100):
            batch = _memories(start, 100, 10, rng)
            t0 = time.perf_counter()
            store.write(batch)
            batches.append((time.perf_counter() - t0) / len(batch))
        total = len(store.all_points())
        size = _disk_bytes(path)
    print(f"  one memory a write (embed, open, upsert, close): p50 {ms(statistics.median(single))}")
    print(f"  in batches of 100: {ms(statistics.median(batches))} a memory")
    print(
        f"  on disk: {size / total:,.0f} bytes a memory ({total:,} memories, {size / 1e6:.1f} MB allocated)"
    )
    return True


_CHILD = """
import sys, time
t0 = time.perf_counter()
from pathlib import Path
from market_analyst.persistence.memory.edge import EdgeMemoryStore
from market_analyst.persistence.memory.embedder import WordLlamaEmbedder
store = EdgeMemoryStore(Path(sys.argv[1]), embedder=WordLlamaEmbedder)
found = store.recall(sys.argv[2], "anything I worried about before?", ticker="NVDA")
print(time.perf_counter() - t0, len(found), "wordllama" in sys.modules)
"""


def fresh(per_owner: int = 1_000, runs: int = 5) -> bool:
    """A new process recalls for an owner with `per_owner` memories, and for one with none."""
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        path = Path(tmp) / "memories"
        seeded(path, per_owner, 1)  # every memory is user-0000's
        results: dict[str, list[float]] = {"with": [], "none": []}
        for _ in range(runs):
            for label, who in (("with", owner(0)), ("none", "nobody")):
                out = subprocess.run(
                    [sys.executable, "-c", _CHILD, str(path), who],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=os.environ.copy(),
                ).stdout.split()
                results[label].append(float(out[0]))
                assert (label == "with") == (out[2] == "True")  # no model for an owner with none
    with_memories, none = statistics.median(results["with"]), statistics.median(results["none"])
    print(
        f"  a fresh process recalls: owner with {per_owner:,} memories {ms(with_memories)} "
        f"(imports, model load, open, query), owner with none {ms(none)} (no model loaded); "
        f"difference {ms(with_memories - none)}"
    )
    return True
