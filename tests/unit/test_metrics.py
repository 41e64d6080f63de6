"""Every metric against a value worked out by hand (the arithmetic is in each test's comment)."""

from __future__ import annotations

import csv
import math
from importlib import resources

import pytest

from market_analyst.analyst import metrics as m
from market_analyst.market_data.base import PriceHistory


def test_period_return_counts_trading_days_back_from_the_last_close():
    # 121 / 100 - 1 = 0.21 over two days; one day: 121 / 110 - 1 = 0.1
    assert m.period_return([100.0, 110.0, 121.0], 2) == pytest.approx(0.21)
    assert m.period_return([100.0, 110.0, 121.0], 1) == pytest.approx(0.1)
    assert m.period_return([100.0, 110.0, 121.0], 3) is None


def test_annualised_volatility_is_sample_stdev_of_log_returns_times_sqrt_252():
    # ln(1.1) = 0.0953102, ln(0.9) = -0.1053605; mean = -0.0050252;
    # deviations +/-0.1003353; sample variance = 2 * 0.1003353^2 / 1 = 0.0201344;
    # sd = 0.1418957; * sqrt(252) = 0.1418957 * 15.8745079 = 2.2525
    assert m.annualised_volatility([100.0, 110.0, 99.0]) == pytest.approx(2.2525, abs=1e-4)
    # A constant series has no volatility; one price has no return to measure.
    assert m.annualised_volatility([50.0, 50.0, 50.0]) == 0.0
    assert m.annualised_volatility([50.0, 51.0]) is None


def test_max_drawdown_is_the_deepest_fall_from_a_running_peak():
    # 120 -> 90 is a 25% fall; 130 -> 104 only 20%.
    assert m.max_drawdown([100.0, 120.0, 90.0, 130.0, 104.0]) == pytest.approx(0.25)
    assert m.max_drawdown([1.0, 2.0, 3.0]) == 0.0
    # The window counts back from the end: with window=2 only [90, 130, 104] count: 130 -> 104 = 20%.
    assert m.max_drawdown([100.0, 120.0, 90.0, 130.0, 104.0], window=2) == pytest.approx(0.2)


def test_simple_moving_average_of_the_last_days():
    # mean(6, 7, 8, 9, 10) = 8
    assert m.simple_moving_average([float(i) for i in range(1, 11)], 5) == 8.0
    assert m.simple_moving_average([1.0, 2.0], 5) is None


def test_rsi_wilder_smoothing_by_hand():
    # period 2, closes 1, 2, 1, 3: changes +1, -1, +2.
    # seed over the first two: avg gain 0.5, avg loss 0.5;
    # then +2: gain = (0.5 * 1 + 2) / 2 = 1.25, loss = (0.5 * 1 + 0) / 2 = 0.25;
    # RS = 5, RSI = 100 - 100 / 6 = 83.3333
    assert m.rsi([1.0, 2.0, 1.0, 3.0], period=2) == pytest.approx(83.33333, abs=1e-4)
    assert m.rsi([float(i) for i in range(1, 30)]) == 100.0  # only gains
    assert m.rsi([5.0] * 20) == 50.0  # no movement at all
    assert m.rsi([1.0, 2.0, 3.0]) is None  # fewer than 14 changes


def test_rsi_only_losses_is_zero():
    assert m.rsi([float(i) for i in range(30, 0, -1)]) == 0.0


def test_trend_needs_price_and_both_averages_in_order():
    assert m.trend(110.0, 100.0, 90.0) == "up"
    assert m.trend(80.0, 90.0, 100.0) == "down"
    assert m.trend(95.0, 100.0, 90.0) == "mixed"
    assert m.trend(95.0, None, 90.0) == "unknown"


def test_distance_from_52_week_high_and_low():
    # high 150: 120 / 150 - 1 = -0.2; low 50: 120 / 50 - 1 = 1.4
    from_high, from_low = m.distance_from_range([100.0, 150.0, 50.0, 120.0])
    assert from_high == pytest.approx(-0.2)
    assert from_low == pytest.approx(1.4)


def _history(ticker: str, dates: list[str], closes: list[float]) -> PriceHistory:
    return PriceHistory(ticker=ticker, dates=tuple(dates), closes=tuple(closes), source="test")


def test_beta_is_two_when_the_asset_moves_twice_the_benchmark_in_log_terms():
    steps = [0.01, -0.02, 0.015, 0.005, -0.01] * 6  # 30 daily log returns
    bench, asset = [100.0], [50.0]
    for r in steps:
        bench.append(bench[-1] * math.exp(r))
        asset.append(asset[-1] * math.exp(2 * r))
    dates = [f"2020-01-{i + 1:02d}" for i in range(len(bench))]
    result = m.beta_and_relative_return(_history("A", dates, asset), _history("SPX", dates, bench))
    assert result is not None
    assert result["beta"] == pytest.approx(2.0)
    # Relative return: (asset_end / asset_start - 1) - (bench_end / bench_start - 1)
    total = sum(steps)
    assert result["relative_return"] == pytest.approx((math.exp(2 * total) - 1) - (math.exp(total) - 1))
    assert result["window_start"] == dates[0] and result["window_end"] == dates[-1]


def test_beta_uses_only_dates_both_series_share():
    bench_dates = [f"2020-02-{i:02d}" for i in range(1, 29)]
    asset_dates = [f"2021-02-{i:02d}" for i in range(1, 29)]
    closes = [float(i) for i in range(1, 29)]
    assert (
        m.beta_and_relative_return(_history("A", asset_dates, closes), _history("SPX", bench_dates, closes))
        is None
    )


def _snapshot_closes(ticker: str) -> list[float]:
    path = resources.files("market_analyst") / "data" / "market-snapshot" / f"{ticker}.csv"
    with path.open() as handle:
        return [float(row["adj_close"]) for row in csv.DictReader(handle)]


def test_nvda_figures_from_the_bundled_snapshot():
    from market_analyst.market_data.snapshot import SnapshotProvider

    provider = SnapshotProvider()
    figures = m.compute_metrics(provider.load("NVDA"), provider.load("SPX"))
    closes = _snapshot_closes("NVDA")
    assert figures["price"] == 138.85  # the CSV's last adj_close, 2025-02-14
    assert figures["return_1y"] == pytest.approx(closes[-1] / closes[-253] - 1, abs=1e-6)
    assert figures["return_1m"] == pytest.approx(closes[-1] / closes[-22] - 1, abs=1e-6)
    assert figures["observations"] == 6558
    # SPX ends 2025-01-31, ten trading days before NVDA: beta over the year both series share.
    assert figures["benchmark"]["window_end"] == "2025-01-31" and figures["benchmark_note"] is None
    assert figures["trend"] in ("up", "down", "mixed")
