"""Figures over a chosen window of a price series: what the analyst's tools compute, and the rule that
decides whether a benchmark comparison means anything. Pure functions over `PriceHistory`.
"""

from __future__ import annotations

import bisect
from typing import Any

from market_analyst.analyst.metrics import (
    BENCHMARK_NAME,
    annualised_volatility,
    benchmark_gap,
    beta_and_relative_return,
    max_drawdown,
)
from market_analyst.market_data.base import PriceHistory

# Trading days in each window a tool accepts.
WINDOWS: dict[str, int] = {"1M": 21, "3M": 63, "6M": 126, "1Y": 252, "2Y": 504, "3Y": 756, "5Y": 1260}


def _pct(value: float) -> float:
    return round(value * 100, 4)


def window_figures(history: PriceHistory, window: str) -> dict[str, Any]:
    """Return, annualised volatility and largest fall over the last `window` (e.g. "3M"), as percentages."""
    days = WINDOWS[window]
    closes = history.closes
    if len(closes) <= days:
        return {"window": window, "available": False, "reason": f"only {len(closes)} daily prices"}
    volatility = annualised_volatility(closes, days)
    return {
        "window": window,
        "available": True,
        "start": history.dates[-1 - days],
        "end": history.as_of,
        "return_pct": _pct(closes[-1] / closes[-1 - days] - 1.0),
        "volatility_pct": _pct(volatility) if volatility is not None else None,
        "max_drawdown_pct": _pct(max_drawdown(closes, days)),
    }


def benchmark_comparison(asset: PriceHistory, benchmark: PriceHistory, days: int = 252) -> dict[str, Any]:
    """Beta and relative return against the benchmark over the ticker's last `days` trading days, as
    percentages; or why there is none (the same rule as the draft's figures)."""
    gap = benchmark_gap(asset, benchmark)
    if gap is not None:
        return {"available": False, "reason": gap}
    relative = beta_and_relative_return(asset, benchmark, days)
    if relative is None:
        return {"available": False, "reason": f"the {BENCHMARK_NAME} series shares fewer than 21 days"}
    benchmark_return = float(relative["benchmark_return"])
    relative_return = float(relative["relative_return"])
    return {
        "available": True,
        "symbol": benchmark.ticker,
        "beta": round(float(relative["beta"]), 4),
        "return_pct": _pct(relative_return + benchmark_return),
        "benchmark_return_pct": _pct(benchmark_return),
        "relative_return_pct": _pct(relative_return),
        "window_start": relative["window_start"],
        "window_end": relative["window_end"],
    }


def price_on(history: PriceHistory, day: str) -> dict[str, Any]:
    """The close on `day`, or on the last trading day before it."""
    index = bisect.bisect_right(history.dates, day) - 1
    if index < 0:
        return {"available": False, "reason": f"the series starts {history.dates[0]}"}
    return {"available": True, "date": history.dates[index], "close": round(history.closes[index], 4)}


def drawdown_episodes(history: PriceHistory, count: int = 3, days: int = 1260) -> list[dict[str, Any]]:
    """The `count` deepest peak-to-trough falls over the last `days`, deepest first, each with its
    dates and whether the price has since come back to the peak."""
    dates, closes = history.dates[-(days + 1) :], history.closes[-(days + 1) :]

    def episode(peak: int, trough: int, recovered: bool) -> dict[str, Any]:
        depth = _pct(1.0 - closes[trough] / closes[peak])
        return {
            "peak_date": dates[peak],
            "trough_date": dates[trough],
            "depth_pct": depth,
            "recovered": recovered,
        }

    episodes = []
    peak = trough = 0
    for i in range(1, len(closes)):
        if closes[i] >= closes[peak]:
            if trough != peak:  # back at the old high: that fall is over
                episodes.append(episode(peak, trough, True))
            peak = trough = i
        elif closes[i] < closes[trough]:
            trough = i
    if trough != peak:
        episodes.append(episode(peak, trough, False))
    episodes.sort(key=lambda e: e["depth_pct"], reverse=True)
    return episodes[:count]
