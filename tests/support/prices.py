"""Made-up daily price series for tests that need data the bundled snapshot lacks (a benchmark that
covers the ticker's year), as `PriceHistory` objects or as the CSV files `--data csv` reads."""

from __future__ import annotations

import math
from datetime import date, timedelta
from pathlib import Path

from market_analyst.market_data.base import PriceHistory


def weekdays(count: int, start: date = date(2023, 1, 2)) -> list[str]:
    """`count` consecutive weekdays from `start`, as ISO dates."""
    days, day = [], start
    while len(days) < count:
        if day.weekday() < 5:
            days.append(day.isoformat())
        day += timedelta(days=1)
    return days


def wavy_series(ticker: str, dates: list[str], scale: float) -> PriceHistory:
    """A rising series with a wave whose size is `scale`: two with different scales give a beta."""
    closes = tuple(100 * math.exp(scale * 0.01 * math.sin(i / 3) + 0.001 * i) for i in range(len(dates)))
    return PriceHistory(ticker=ticker, dates=tuple(dates), closes=closes, source="test")


def write_csv(path: Path, history: PriceHistory) -> None:
    """`history` as a `TICKER.csv` in the columns `--data csv` reads."""
    rows = ["date,open,high,low,close,adj_close,volume"]
    rows += [f"{d},{c},{c},{c},{c},{c},1000" for d, c in zip(history.dates, history.closes, strict=True)]
    path.write_text("\n".join(rows) + "\n")
