"""Archive bench: `reports list` and `reports search` over N archived reports, side by side with a
naive reader that parses every file on each call (the approach of the project this one is based on);
and (`run_postgres`) the directory archive against the PostgreSQL one (`MA_RECORDS=postgres`) at the
same size, filled by `records migrate`'s own copy."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from market_analyst.analyst.rules import RulesAnalyst
from market_analyst.context import Deps
from market_analyst.graph import build_graph
from market_analyst.market_data.snapshot import SnapshotProvider
from market_analyst.nodes.publish import operation_id_for
from market_analyst.persistence.archive.document import build_document, render_document
from market_analyst.persistence.archive.files import ReportArchive
from market_analyst.ports import PublishRequest
from market_analyst.state import Approval, Profile

TICKERS = ("NVDA", "MSFT", "NFLX", "TSLA", "SPX")
# What a listing shows by default (reports list --limit).
PAGE = 50


class _NoProfiles:
    """Every user has the default profile."""

    def get(self, user_id: str) -> Profile | None:
        return None


def drafted_states(deps: Deps) -> dict[str, dict[str, Any]]:
    """One real drafted state per ticker, made by the real graph with `deps`."""
    graph = build_graph(checkpointer=InMemorySaver())
    states = {}
    for ticker in TICKERS:
        inputs = {"ticker": ticker, "question": "", "user_id": "bench", "feedback": []}
        states[ticker] = graph.invoke(inputs, {"configurable": {"thread_id": ticker}}, context=deps)
    return states


def _real_states(archive: ReportArchive) -> dict[str, dict[str, Any]]:
    """One real drafted state per ticker, from the bundled snapshot, every user on the default profile."""
    return drafted_states(
        Deps(market_data=SnapshotProvider(), profiles=_NoProfiles(), archive=archive, analyst=RulesAnalyst())
    )


def fill(archive: ReportArchive, n: int) -> None:
    """Write `n` real-shaped reports (five tickers, fifty users, one thread each) as `publish` would
    render them, without its per-document fsyncs, which would make the set-up take minutes."""
    archive.root.mkdir(parents=True, exist_ok=True)
    states = _real_states(archive)
    for i in range(n):
        ticker = TICKERS[i % len(TICKERS)]
        state = dict(states[ticker], user_id=f"user{i % 50}")
        approval = Approval(
            decision="approved",
            by="bench",
            at=f"2025-02-15T00:{i // 60 % 60:02d}:{i % 60:02d}+00:00",
            draft_id=state["draft"]["draft_id"],
        )
        thread_id = f"thread-{i:06d}"
        request = PublishRequest(
            operation_id=operation_id_for(thread_id, state["draft"]["draft_id"]),
            thread_id=thread_id,
            user_id=state["user_id"],
            draft=state["draft"],
            approval=approval.model_dump(mode="json"),
        )
        document = build_document(request)
        (archive.root / f"{document['key']}.json").write_bytes(render_document(document))


def naive_search(
    root: Path, *, ticker: str | None = None, text: str | None = None, limit: int = PAGE
) -> list[str]:
    """Parse every document, filter in Python, and take the newest `limit`."""
    found = []
    for path in root.glob("*.json"):
        document = json.loads(path.read_text())
        if ticker and document["ticker"] != ticker:
            continue
        if text and text.casefold() not in document["markdown"].casefold():
            continue
        found.append((document["created_at"], document["key"]))
    return [key for _, key in sorted(found, reverse=True)[:limit]]


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    samples, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


def run(n: int = 10_000, repeat: int = 5) -> None:
    """Print the timings and ratios (the two readers must also agree on every answer)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = ReportArchive(Path(tmp) / "reports")
        start = time.perf_counter()
        fill(archive, n)
        print(f"archive: {n:,} archived reports")
        print(f"  wrote them in {time.perf_counter() - start:.1f} s")
        cold, _ = median_time(lambda: archive.list(), 1)
        print(f"  first listing, which builds the index from every document: {cold * 1000:.0f} ms")
        print(f"  each listing shows the newest {PAGE}, as the CLI does by default")
        cases = [
            (
                "reports list",
                lambda: [r.key for r in archive.search(limit=PAGE).reports],
                lambda: naive_search(archive.root),
            ),
            (
                "reports search --ticker NVDA",
                lambda: [r.key for r in archive.search(ticker="NVDA", limit=PAGE).reports],
                lambda: naive_search(archive.root, ticker="NVDA"),
            ),
            (
                "reports search 'trend: up'",
                lambda: [r.key for r in archive.search(text="trend: up", limit=PAGE).reports],
                lambda: naive_search(archive.root, text="trend: up"),
            ),
        ]
        for name, indexed, naive in cases:
            t_index, got = median_time(indexed, repeat)
            t_naive, want = median_time(naive, repeat)
            assert got == want, f"{name}: indexed and naive readers disagree"
            print(
                f"  {name:<30} {len(got):>6} shown  indexed {t_index * 1000:8.1f} ms  "
                f"naive {t_naive * 1000:8.1f} ms  ratio {t_naive / t_index:6.1f}x"
            )


def run_postgres(n: int = 100_000, repeat: int = 5) -> None:
    """The same reports in the directory archive and in PostgreSQL (an embedded server of its own),
    each listing timed at its p50 on both, side by side; both must give the same answer."""
    from market_analyst.persistence.archive.postgres import PostgresArchive
    from market_analyst.persistence.migrate import copy_archive
    from market_analyst.persistence.postgres.embedded import discard_embedded_postgres, embedded_postgres_uri
    from market_analyst.persistence.postgres.server import PostgresServer

    with tempfile.TemporaryDirectory() as tmp:
        directory = ReportArchive(Path(tmp) / "reports")
        start = time.perf_counter()
        fill(directory, n)
        print(f"archive-postgres: {n:,} archived reports, the directory archive against PostgreSQL")
        print(f"  wrote the directory in {time.perf_counter() - start:.1f} s")
        cold, _ = median_time(lambda: directory.list(), 1)
        print(f"  first directory listing, which builds its index: {cold:.1f} s")
        pgdata = Path(tmp) / "server"
        try:
            postgres = PostgresArchive(PostgresServer(embedded_postgres_uri(pgdata), pgdata))
            start = time.perf_counter()
            counts = copy_archive(directory, postgres)
            took = time.perf_counter() - start
            assert counts.copied == n and not counts.conflicts and not counts.unreadable, counts
            print(
                f"  records migrate copied them into PostgreSQL in {took:.1f} s "
                f"({n / took:,.0f} reports/s, each checked byte for byte)"
            )
            print(
                f"  p50 of {repeat}, newest {PAGE} shown; "
                "PostgreSQL opens a connection per call, as a command does"
            )
            cases = [
                ("reports list", {}),
                ("reports search --ticker NVDA", {"ticker": "NVDA"}),
                ("reports search --user user7", {"user_id": "user7"}),
                ("reports search 'trend: up'", {"text": "trend: up"}),
            ]
            for name, filters in cases:
                t_dir, want = median_time(lambda f=filters: directory.search(limit=PAGE, **f), repeat)
                t_pg, got = median_time(lambda f=filters: postgres.search(limit=PAGE, **f), repeat)
                assert [r.key for r in got.reports] == [r.key for r in want.reports], name
                assert got.more == want.more, name
                print(
                    f"  {name:<30} {len(got.reports):>3} shown of {len(got.reports) + got.more:>7,}  "
                    f"directory {t_dir * 1000:8.1f} ms  postgres {t_pg * 1000:8.1f} ms  "
                    f"ratio {t_dir / t_pg:5.2f}x"
                )
        finally:
            discard_embedded_postgres(pgdata)


if __name__ == "__main__":
    import sys

    run(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
