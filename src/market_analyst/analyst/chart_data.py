"""What a price chart of the analysed year needs, small enough to travel in the draft.

The draft (and so the archive) keeps this series, so a published report shows the chart it was
approved with, drawn again from the same numbers. It is deliberately coarse: every other trading day
of the year (at most `MAX_POINTS` points, the last day always included), five significant digits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date
from typing import Any

from market_analyst.analyst.metrics import TRADING_DAYS, drawdown_episode
from market_analyst.market_data.base import PriceHistory

MAX_POINTS = 128
SMA_WINDOWS = (50, 200)


def _short(value: float | None) -> float | None:
    """Five significant digits: enough for a line a few hundred pixels tall, and a small state."""
    return None if value is None else float(f"{value:.5g}")


def rolling_means(closes: Sequence[float], days: int) -> list[float | None]:
    """The mean of the `days` closes ending at each day (None until there are that many)."""
    means: list[float | None] = []
    total = 0.0
    for i, price in enumerate(closes):
        total += price
        if i >= days:
            total -= closes[i - days]
        means.append(total / days if i >= days - 1 else None)
    return means


def sample_indexes(first: int, last: int, max_points: int = MAX_POINTS) -> list[int]:
    """Evenly spaced indexes from `first` to `last` (both included), at most `max_points` of them."""
    count = last - first + 1
    step = max(1, math.ceil((count - 1) / (max_points - 1))) if count > 1 else 1
    picked = list(range(last, first - 1, -step))[::-1]  # counted back from the last day, which stays
    return picked[-max_points:]


def chart_series(history: PriceHistory, window: int = TRADING_DAYS) -> dict[str, Any]:
    """The analysed year's closes, 50- and 200-day averages, and its largest drawdown.

    Dates are days after `start`, so the series stays a short list of numbers; the drawdown is the
    one the figures report (`max_drawdown_1y`), by its peak and trough dates."""
    closes, dates = history.closes, history.dates
    first = max(len(closes) - (window + 1), 0)
    indexes = sample_indexes(first, len(closes) - 1)
    start = date.fromisoformat(dates[indexes[0]])
    averages = {days: rolling_means(closes, days) for days in SMA_WINDOWS}
    depth, peak, trough = drawdown_episode(closes, window)
    return {
        "start": start.isoformat(),
        "days": [(date.fromisoformat(dates[i]) - start).days for i in indexes],
        "close": [_short(closes[i]) for i in indexes],
        **{f"sma_{days}": [_short(averages[days][i]) for i in indexes] for days in SMA_WINDOWS},
        "drawdown": {"peak": dates[peak], "trough": dates[trough], "depth": round(depth, 6)},
    }
