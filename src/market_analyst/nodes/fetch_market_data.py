"""fetch_market_data: load prices and reduce them to figures and a coarse chart series; the raw
series stay out of the state."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from market_analyst.analyst.chart_data import chart_series
from market_analyst.analyst.metrics import compute_metrics
from market_analyst.context import Deps
from market_analyst.errors import UserError
from market_analyst.market_data import BENCHMARK
from market_analyst.state import AnalystState


def fetch_market_data(state: AnalystState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Compute every figure the report may cite, with the as-of date and the data source, and the
    few hundred numbers its price chart needs."""
    market_data = runtime.context.market_data
    ticker = state["ticker"]
    history = market_data.load(ticker)
    benchmark, missing = None, f"{ticker} is the S&P 500 itself"
    if ticker != BENCHMARK:
        try:
            benchmark = market_data.load(BENCHMARK)
        except UserError:
            missing = f"the data source has no S&P 500 series ({BENCHMARK})"
    return {
        "market": {
            "figures": compute_metrics(history, benchmark, missing),
            "chart": chart_series(history),
            "as_of": history.as_of,
            "first_day": history.dates[0],
            "data_source": market_data.describe(history.as_of),
            "provider": market_data.name,
        }
    }
