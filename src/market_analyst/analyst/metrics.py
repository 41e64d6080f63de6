"""Price metrics computed from daily adjusted closes. Pure functions; every one has a unit test.

Windows are counted in trading days: 1M = 21, 3M = 63, 6M = 126, 1Y = 252.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from market_analyst.market_data.base import PriceHistory

TRADING_DAYS = 252
RETURN_WINDOWS = {"1m": 21, "3m": 63, "6m": 126, "1y": 252}


def period_return(closes: Sequence[float], days: int) -> float | None:
    """Simple return over the last `days` trading days, or None when the series is shorter."""
    if len(closes) <= days:
        return None
    return closes[-1] / closes[-1 - days] - 1.0


def daily_log_returns(closes: Sequence[float]) -> list[float]:
    """ln(p[t] / p[t-1]) for each consecutive pair."""
    return [math.log(b / a) for a, b in zip(closes, closes[1:], strict=False)]


def annualised_volatility(closes: Sequence[float], window: int = TRADING_DAYS) -> float | None:
    """Sample standard deviation of daily log returns over the last `window` days, times sqrt(252)."""
    returns = daily_log_returns(closes[-(window + 1) :])
    if len(returns) < 2:
        return None
    mean = sum(returns) / len(returns)
    variance = sum((r - mean) ** 2 for r in returns) / (len(returns) - 1)
    return math.sqrt(variance) * math.sqrt(TRADING_DAYS)


def drawdown_episode(closes: Sequence[float], window: int = TRADING_DAYS) -> tuple[float, int, int]:
    """The largest peak-to-trough fall over the last `window` + 1 closes: (depth as a positive
    fraction, index of the peak, index of the trough), indexes into `closes`. The first such fall
    wins a tie; without any fall both indexes name the window's first close."""
    start = max(len(closes) - (window + 1), 0)
    peak_at, worst = start, (0.0, start, start)
    for i in range(start, len(closes)):
        if closes[i] > closes[peak_at]:
            peak_at = i
        fall = 1.0 - closes[i] / closes[peak_at]
        if fall > worst[0]:
            worst = (fall, peak_at, i)
    return worst


def max_drawdown(closes: Sequence[float], window: int = TRADING_DAYS) -> float:
    """Largest peak-to-trough fall over the last `window` + 1 closes, as a positive fraction."""
    return drawdown_episode(closes, window)[0]


def simple_moving_average(closes: Sequence[float], days: int) -> float | None:
    """Mean of the last `days` closes, or None when the series is shorter."""
    if len(closes) < days:
        return None
    return sum(closes[-days:]) / days


def rsi(closes: Sequence[float], period: int = 14) -> float | None:
    """Wilder's RSI: seeded with the mean gain and loss of the first `period` changes, then smoothed.

    Uses the whole series, as the classic definition does; None when fewer than `period` changes.
    """
    changes = [b - a for a, b in zip(closes, closes[1:], strict=False)]
    if len(changes) < period:
        return None
    avg_gain = sum(max(c, 0.0) for c in changes[:period]) / period
    avg_loss = sum(max(-c, 0.0) for c in changes[:period]) / period
    for change in changes[period:]:
        avg_gain = (avg_gain * (period - 1) + max(change, 0.0)) / period
        avg_loss = (avg_loss * (period - 1) + max(-change, 0.0)) / period
    if avg_loss == 0.0:
        return 100.0 if avg_gain > 0 else 50.0
    return 100.0 - 100.0 / (1.0 + avg_gain / avg_loss)


def trend(price: float, sma50: float | None, sma200: float | None) -> str:
    """ "up" when price > SMA50 > SMA200, "down" when price < SMA50 < SMA200, else "mixed"."""
    if sma50 is None or sma200 is None:
        return "unknown"
    if price > sma50 > sma200:
        return "up"
    if price < sma50 < sma200:
        return "down"
    return "mixed"


def distance_from_range(closes: Sequence[float], window: int = TRADING_DAYS) -> tuple[float, float]:
    """(price / 52-week high - 1, price / 52-week low - 1), over the last `window` + 1 closes."""
    recent = closes[-(window + 1) :]
    price = recent[-1]
    return price / max(recent) - 1.0, price / min(recent) - 1.0


# The benchmark must reach this close to the ticker's as-of date (in the ticker's trading days) for a
# comparison over a year ending there to say something about the ticker now: a month. When it ends
# earlier than the as-of date, the comparison is over the last year both series share, and every
# report names that window.
BENCHMARK_REACH_DAYS = 21
BENCHMARK_NAME = "S&P 500"


def benchmark_gap(asset: PriceHistory, benchmark: PriceHistory) -> str | None:
    """Why comparing `asset` with `benchmark` over their last shared year would mislead, or None when it
    would not: the benchmark must reach within `BENCHMARK_REACH_DAYS` trading days of the as-of date."""
    reach_from = asset.dates[max(0, len(asset.dates) - 1 - BENCHMARK_REACH_DAYS)]
    if benchmark.as_of < reach_from:
        return (
            f"the {BENCHMARK_NAME} series ends {benchmark.as_of}, more than {BENCHMARK_REACH_DAYS} "
            f"trading days before {asset.ticker}'s as-of date ({asset.as_of})"
        )
    return None


def beta_and_relative_return(
    asset: PriceHistory, benchmark: PriceHistory, window: int = TRADING_DAYS
) -> dict[str, float | str] | None:
    """Beta and return relative to `benchmark` over the asset's last `window` trading days up to where
    the earlier of the two series ends, on the dates both share there. None when they share fewer
    than 21 days (see also `benchmark_gap`).

    Beta = cov(a, b) / var(b) of daily log returns on common dates; relative return = asset return -
    benchmark return over the window."""
    end = min(asset.as_of, benchmark.as_of)
    last = bisect.bisect_right(asset.dates, end) - 1
    if last < 0:
        return None
    start = asset.dates[max(0, last - window)]
    bench = dict(zip(benchmark.dates, benchmark.closes, strict=True))
    common = [
        (d, c, bench[d])
        for d, c in zip(asset.dates, asset.closes, strict=True)
        if start <= d <= end and d in bench
    ]
    if len(common) < 21:
        return None
    a = daily_log_returns([c for _, c, _ in common])
    b = daily_log_returns([c for _, _, c in common])
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b, strict=True)) / (len(a) - 1)
    var_b = sum((y - mean_b) ** 2 for y in b) / (len(b) - 1)
    asset_return = common[-1][1] / common[0][1] - 1.0
    bench_return = common[-1][2] / common[0][2] - 1.0
    return {
        "beta": cov / var_b if var_b else 0.0,
        "relative_return": asset_return - bench_return,
        "benchmark_return": bench_return,
        "window_start": common[0][0],
        "window_end": common[-1][0],
    }


def benchmark_figures(
    history: PriceHistory, benchmark: PriceHistory | None, missing: str
) -> tuple[dict[str, object] | None, str | None]:
    """(the benchmark comparison, None) when it means something, else (None, why there is none).
    `missing` says why when there is no benchmark series at all."""
    if benchmark is None:
        return None, missing
    gap = benchmark_gap(history, benchmark)
    if gap is not None:
        return None, gap
    relative = beta_and_relative_return(history, benchmark)
    if relative is None:
        return (
            None,
            f"the {BENCHMARK_NAME} series shares fewer than 21 days with {history.ticker}'s last year",
        )
    return {
        "symbol": benchmark.ticker,
        "beta": _round(float(relative["beta"]), 4),
        "relative_return": _round(float(relative["relative_return"])),
        "benchmark_return": _round(float(relative["benchmark_return"])),
        "window_start": relative["window_start"],
        "window_end": relative["window_end"],
    }, None


def _round(value: float | None, places: int = 6) -> float | None:
    return None if value is None else round(value, places)


def compute_metrics(
    history: PriceHistory, benchmark: PriceHistory | None, missing: str = "no S&P 500 series was found"
) -> dict[str, object]:
    """Every figure a report may cite, rounded to fixed places so reports compare byte for byte.
    A benchmark comparison is there only when it means something; `benchmark_note` says why not."""
    closes = history.closes
    price = closes[-1]
    sma50 = simple_moving_average(closes, 50)
    sma200 = simple_moving_average(closes, 200)
    from_high, from_low = distance_from_range(closes)
    figures: dict[str, object] = {
        "price": _round(price, 4),
        **{f"return_{k}": _round(period_return(closes, n)) for k, n in RETURN_WINDOWS.items()},
        "volatility_1y": _round(annualised_volatility(closes)),
        "max_drawdown_1y": _round(max_drawdown(closes)),
        "sma_50": _round(sma50, 4),
        "sma_200": _round(sma200, 4),
        "trend": trend(price, sma50, sma200),
        "rsi_14": _round(rsi(closes), 4),
        "from_52w_high": _round(from_high),
        "from_52w_low": _round(from_low),
        "observations": len(closes),
    }
    figures["benchmark"], figures["benchmark_note"] = benchmark_figures(history, benchmark, missing)
    return figures
