"""Beta and relative return only over the ticker's last year, and only when the benchmark reaches
within five trading days of the ticker's as-of date; otherwise the draft says why there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from market_analyst.analyst import metrics
from tests.support.cli import Cli
from tests.support.prices import wavy_series, weekdays, write_csv


@pytest.mark.parametrize(("cut", "has_beta"), [(0, True), (5, True), (6, False), (300, False)])
def test_the_benchmark_must_reach_within_five_trading_days(cut: int, has_beta: bool):
    dates = weekdays(400)
    asset = wavy_series("ACME", dates, 2.0)
    benchmark = wavy_series("SPX", dates[: len(dates) - cut], 1.0)
    figures = metrics.compute_metrics(asset, benchmark)
    assert (figures["benchmark"] is not None) is has_beta
    if has_beta:
        assert figures["benchmark"]["window_start"] == dates[-253]  # the ticker's last year
        assert figures["benchmark_note"] is None
    else:
        assert f"the S&P 500 series ends {benchmark.as_of}" in figures["benchmark_note"]


@pytest.mark.parametrize(("ticker", "as_of"), [("NVDA", "2025-02-14"), ("MSFT", "2021-03-31")])
def test_snapshot_tickers_past_the_benchmark_get_no_beta_and_the_draft_says_why(
    cli: Cli, ticker: str, as_of: str
):
    draft = cli.ok("analyze", ticker, "--json").json()["draft"]
    assert draft["as_of"] == as_of and draft["figures"]["benchmark"] is None
    reason = f"the S&P 500 series ends 2020-11-20, before {ticker}'s last year (to {as_of})"
    assert f"| beta vs S&P 500 | none: {reason} |" in draft["markdown"]
    assert not any("beta" in risk for risk in draft["risk_factors"])


def test_a_csv_pair_whose_benchmark_covers_the_year_gets_a_beta(cli: Cli, tmp_path: Path):
    dates = weekdays(400)
    write_csv(tmp_path / "ACME.csv", wavy_series("ACME", dates, 2.0))
    write_csv(tmp_path / "SPX.csv", wavy_series("SPX", dates, 1.0))
    env = {"MA_CSV_DIR": str(tmp_path)}
    draft = cli.ok("analyze", "ACME", "--data", "csv", "--json", extra_env=env).json()["draft"]
    bench = draft["figures"]["benchmark"]
    assert bench is not None and bench["window_end"] == dates[-1]
    assert f"| beta vs S&P 500 ({bench['window_start']} to {dates[-1]}) |" in draft["markdown"]
