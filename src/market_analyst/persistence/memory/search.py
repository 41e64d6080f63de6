"""How recall composes its query: every number that tunes retrieval is here, in one place.

A recall runs, inside the engine and filtered by owner (and not superseded) at every stage:

1. two prefetches of `PREFETCH_LIMIT` candidates each: the nearest dense vectors (meaning) and the
   nearest BM25 sparse vectors (words, weighted by IDF over the collection);
2. distribution-based score fusion (DBSF) of the two lists: each list's scores are mapped linearly
   so that its mean minus and plus three standard deviations become 0 and 1, and a memory's fused
   score is the sum over the lists it is in (no constant to tune);
3. for `hybrid_recency`, a rescoring formula: the fused score times a recency factor and a ticker
   factor (below), evaluated by Qdrant's `Formula` on the candidates the fusion kept;
4. at most `limit` results, then as many as fit in the character budget (in `budget`).

The recency factor is `1 - RECENCY_WEIGHT + RECENCY_WEIGHT * decay`, where `decay` is Qdrant's
exponential decay of the memory's age (`created_at` against now) that is `RECENCY_MIDPOINT` at
`RECENCY_SCALE_DAYS`. Multiplying keeps relevance first: an old memory that matches still beats a
fresh one that does not. The ticker factor is `1 + TICKER_BOOST` for a memory about the ticker the
run analyses.

The modes `bm25`, `dense` and `hybrid` stop after step 1 (one list) or step 2: the baselines that
`make eval-memory` compares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from market_analyst.choices import RecallMode
from market_analyst.persistence.memory.points import LIVE, iso_z
from market_analyst.state import Memory

PREFETCH_LIMIT = 40  # candidates each retriever contributes before fusion
# How the two lists are fused. Reciprocal rank fusion (k=5, chosen over the usual 60, which left
# fused scores so flat that the recency and ticker factors below decided the order) keeps only ranks;
# DBSF keeps how far a memory's score stands above the rest of its list, so a clear winner of one
# retriever is not pulled level with the other's runner-up. Measured by `make eval-memory` on the
# full set (recall@5 / MRR, RRF k=5 -> DBSF): hybrid 0.879/0.660 -> 0.887/0.649, hybrid with recency
# 0.894-0.903/0.682-0.687 -> 0.918/0.693, its recall@5 on the newer-opinion questions 0.962 -> 1.000.
# Also tried, none better: RRF k=2, 10 (hybrid 0.883, 0.863), RRF weighting dense 1.5x, 2x, 3x (hybrid
# 0.879 each), prefetch limits 10, 20, 100 (DBSF hybrid 0.875, 0.887, 0.887).
FUSED_LIMIT = 40  # fused candidates the rescoring formula sees
RECENCY_WEIGHT = 0.3  # how much of the score recency can take away from an old memory
RECENCY_SCALE_DAYS = 180.0  # age at which the decay reaches RECENCY_MIDPOINT
RECENCY_MIDPOINT = 0.5
TICKER_BOOST = 0.5  # a memory about the analysed ticker counts this much more
REPORT_WEIGHT = 0.7  # a published report's memory counts this much: it names the ticker, seldom an answer
RELEVANCE_FLOOR = 0.55  # the least rescored score a memory needs to be recalled at all


@dataclass(frozen=True)
class Recall:
    """One recall as the engines run it: whose memories (a checked user ID), the query, how many at
    most, and how they rank (the ticker favoured, the mode, the moment recency is measured from, and
    whether `hybrid_recency` drops what scores under `RELEVANCE_FLOOR`)."""

    owner: str
    query: str
    limit: int
    ticker: str | None
    mode: RecallMode
    now: datetime
    floor: bool = True

    @property
    def score_threshold(self) -> float | None:
        return RELEVANCE_FLOOR if self.floor and self.mode == "hybrid_recency" else None


def owner_filter(owner: str, *, live_only: bool = True) -> Any:
    """The filter every read carries: exactly this owner (and, for recall, not superseded)."""
    from qdrant_edge import FieldCondition, Filter, MatchValue

    must = [FieldCondition(key="owner", match=MatchValue(owner))]
    if live_only:
        must.append(FieldCondition(key="status", match=MatchValue(LIVE)))
    return Filter(must=list(must))


def edge_query(recall: Recall, *, dense: Sequence[float] | None, sparse: Any) -> Any:
    """The Qdrant Edge `QueryRequest` for `recall` (see the module docstring), given the query's dense
    vector (None for `bm25`) and its BM25 vector."""
    from qdrant_edge import Prefetch, Query, QueryRequest

    live, mode, limit = owner_filter(recall.owner), recall.mode, recall.limit
    if mode == "bm25":
        return QueryRequest(
            limit=limit,
            query=Query.Nearest(sparse, using="bm25"),
            filter=live,
            with_payload=True,
            with_vector=False,
        )
    if mode == "dense":
        assert dense is not None
        return QueryRequest(
            limit=limit,
            query=Query.Nearest(list(dense), using="dense"),
            filter=live,
            with_payload=True,
            with_vector=False,
        )
    assert dense is not None
    prefetches = [
        Prefetch(limit=PREFETCH_LIMIT, query=Query.Nearest(list(dense), using="dense"), filter=live),
        Prefetch(limit=PREFETCH_LIMIT, query=Query.Nearest(sparse, using="bm25"), filter=live),
    ]
    if mode == "hybrid":
        return QueryRequest(
            limit=limit,
            prefetches=prefetches,
            query=_fusion(),
            with_payload=True,
            with_vector=False,
        )
    fused = Prefetch(limit=FUSED_LIMIT, prefetches=prefetches, query=_fusion())
    return QueryRequest(
        limit=limit,
        prefetches=[fused],
        query=recency_formula(ticker=recall.ticker, now=recall.now),
        filter=live,
        score_threshold=recall.score_threshold,
        with_payload=True,
        with_vector=False,
    )


def _fusion() -> Any:
    # The stubs list `Fusion.Dbsf` as a nested class, not a `Fusion`, though the engine takes it.
    from qdrant_edge import Fusion

    return Fusion.Dbsf()


def recency_formula(*, ticker: str | None, now: datetime) -> Any:
    """`$score * (1 - w + w * exp_decay(age)) * (1 + boost * [ticker matches])` as an Edge `Formula`."""
    from qdrant_edge import DecayKind, Expression, FieldCondition, Formula, MatchValue

    decay = Expression.Decay(
        DecayKind.Exp,
        Expression.DatetimeKey("created_at"),
        target=Expression.Datetime(iso_z(now)),
        midpoint=RECENCY_MIDPOINT,
        scale=RECENCY_SCALE_DAYS * 86400.0,
    )
    recency = Expression.Sum(
        [
            Expression.Constant(1.0 - RECENCY_WEIGHT),
            Expression.Mult([Expression.Constant(RECENCY_WEIGHT), decay]),
        ]
    )
    is_report = Expression.Condition(FieldCondition(key="kind", match=MatchValue("report")))
    report = Expression.Sum(
        [Expression.Constant(1.0), Expression.Mult([Expression.Constant(REPORT_WEIGHT - 1.0), is_report])]
    )
    factors = [Expression.Variable("$score"), recency, report]
    if ticker:
        on_ticker = Expression.Condition(FieldCondition(key="ticker", match=MatchValue(ticker)))
        factors.append(
            Expression.Sum(
                [Expression.Constant(1.0), Expression.Mult([Expression.Constant(TICKER_BOOST), on_ticker])]
            )
        )
    return Formula(Expression.Mult(factors))


def within_budget(ranked: Sequence[Memory], *, limit: int, budget_chars: int) -> list[Memory]:
    """The best `limit` memories, in order, skipping any that would take the texts past
    `budget_chars` in all."""
    kept: list[Memory] = []
    used = 0
    for memory in ranked:
        if len(kept) >= limit:
            break
        if used + len(memory.text) > budget_chars:
            continue
        kept.append(memory)
        used += len(memory.text)
    return kept


def client_query(recall: Recall, *, dense: Sequence[float] | None, sparse: Any) -> dict[str, Any]:
    """The same recall as `edge_query`, as `qdrant_client.query_points` keyword arguments but the
    limit (a Qdrant server, where the engine also turns BM25 term frequencies into IDF-weighted
    scores)."""
    from qdrant_client import models

    owner, mode, ticker, now = recall.owner, recall.mode, recall.ticker, recall.now

    live = models.Filter(
        must=[
            models.FieldCondition(key="owner", match=models.MatchValue(value=owner)),
            models.FieldCondition(key="status", match=models.MatchValue(value=LIVE)),
        ]
    )
    words = models.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
    if mode == "bm25":
        return {"query": words, "using": "bm25", "query_filter": live}
    assert dense is not None
    if mode == "dense":
        return {"query": list(dense), "using": "dense", "query_filter": live}
    prefetch = [
        models.Prefetch(query=list(dense), using="dense", filter=live, limit=PREFETCH_LIMIT),
        models.Prefetch(query=words, using="bm25", filter=live, limit=PREFETCH_LIMIT),
    ]
    fusion = models.FusionQuery(fusion=models.Fusion.DBSF)
    if mode == "hybrid":
        return {"prefetch": prefetch, "query": fusion}
    decay = models.ExpDecayExpression(
        exp_decay=models.DecayParamsExpression(
            x=models.DatetimeKeyExpression(datetime_key="created_at"),
            target=models.DatetimeExpression(datetime=iso_z(now)),
            scale=RECENCY_SCALE_DAYS * 86400.0,
            midpoint=RECENCY_MIDPOINT,
        )
    )
    is_report = models.FieldCondition(key="kind", match=models.MatchValue(value="report"))
    factors: list[Any] = [
        "$score",
        models.SumExpression(sum=[1.0 - RECENCY_WEIGHT, models.MultExpression(mult=[RECENCY_WEIGHT, decay])]),
        models.SumExpression(sum=[1.0, models.MultExpression(mult=[REPORT_WEIGHT - 1.0, is_report])]),
    ]
    if ticker:
        on_ticker = models.FieldCondition(key="ticker", match=models.MatchValue(value=ticker))
        factors.append(models.SumExpression(sum=[1.0, models.MultExpression(mult=[TICKER_BOOST, on_ticker])]))
    return {
        "prefetch": [models.Prefetch(prefetch=prefetch, query=fusion, limit=FUSED_LIMIT)],
        "query": models.FormulaQuery(formula=models.MultExpression(mult=factors)),
        "query_filter": live,
        "score_threshold": recall.score_threshold,
    }
