"""Many real-shaped archived reports, fast: the project's own document builder over drafts the real
graph made, written straight into a directory archive (no `analyze` run, no per-file fsync)."""

from __future__ import annotations

import functools
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
from market_analyst.state import Approval

TICKERS = ("NVDA", "MSFT", "NFLX", "TSLA")


class _NoProfiles:
    def get(self, user_id: str) -> None:
        return None


@functools.cache
def _drafts() -> dict[str, dict[str, Any]]:
    """One real draft per ticker, from the bundled snapshot, on the default profile."""
    deps = Deps(
        market_data=SnapshotProvider(),
        profiles=_NoProfiles(),
        archive=ReportArchive(Path("/nonexistent")),
        analyst=RulesAnalyst(),
    )
    graph = build_graph(checkpointer=InMemorySaver())
    drafts = {}
    for ticker in TICKERS:
        inputs = {"ticker": ticker, "question": "", "user_id": "u", "feedback": []}
        drafts[ticker] = graph.invoke(inputs, {"configurable": {"thread_id": ticker}}, context=deps)["draft"]
    return drafts


def report_document(i: int) -> dict[str, Any]:
    """The `i`-th report: its ticker, user (one of fifty) and thread follow from `i`."""
    draft = _drafts()[TICKERS[i % len(TICKERS)]]
    at = f"2025-02-{15 + i // 86400 % 10:02d}T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}+00:00"
    approval = Approval(decision="approved", by="bob", at=at, draft_id=draft["draft_id"])
    thread_id = f"thread-{i:06d}"
    return build_document(
        PublishRequest(
            operation_id=operation_id_for(thread_id, draft["draft_id"]),
            thread_id=thread_id,
            user_id=f"user{i % 50}",
            draft=draft,
            approval=approval.model_dump(mode="json"),
        )
    )


def write_reports(root: Path, n: int) -> list[str]:
    """Write `n` reports into the directory archive at `root`, as `publish` renders them; their keys."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    keys = []
    for i in range(n):
        document = report_document(i)
        (root / f"{document['key']}.json").write_bytes(render_document(document))
        keys.append(document["key"])
    return keys
