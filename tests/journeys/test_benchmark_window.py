"""Beta and relative return over the last year the ticker and the benchmark share, only when the
benchmark reaches within a month (21 trading days) of the ticker's as-of date, and always with the
window they cover; otherwise the draft says why there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from market_analyst.analyst import metrics
from tests.support.cli import Cli
from tests.support.prices import wavy_series, weekdays, write_csv


@pytest.mark.parametrize(("cut", "has_beta"), [(0, True), (10, True), (21, True), (22, False), (300, False)])
def test_the_benchmark_must_reach_within_a_month(cut: int, has_beta: bool):
    dates = weekdays(400)
    asset = wavy_series("ACME", dates, 2.0)
    benchmark = wavy_series("SPX", dates[: len(dates) - cut], 1.0)
    figures = metrics.compute_metrics(asset, benchmark)
    assert (figures["benchmark"] is not None) is has_beta
    if has_beta:
        # The year before the last day both series have: the ticker's last year when the benchmark
        # reaches the as-of date, else the year to where the benchmark ends.
        assert figures["benchmark"]["window_end"] == benchmark.as_of == dates[-1 - cut]
        assert figures["benchmark"]["window_start"] == dates[-253 - cut]
        assert figures["benchmark_note"] is None
    else:
        assert (
            f"the S&P 500 series ends {benchmark.as_of}, more than 21 trading days"
            in figures["benchmark_note"]
        )


@pytest.mark.parametrize(
    ("ticker", "as_of", "window"),
    [
        # NVDA's series runs ten trading days past the index's: the window ends where the index does.
        ("NVDA", "2025-02-14", ("2024-01-30", "2025-01-31")),
        ("MSFT", "2021-03-31", ("2020-03-31", "2021-03-31")),
        ("AAPL", "2024-12-30", ("2023-12-28", "2024-12-30")),
    ],
)
def test_bundled_tickers_show_beta_and_relative_return_with_the_window_they_cover(
    cli: Cli, ticker: str, as_of: str, window: tuple[str, str]
):
    result = cli.ok("analyze", ticker)
    view = cli.ok("status", result.stdout.split()[1].rstrip(":"), "--json").json()
    draft = view["draft"]
    bench = draft["figures"]["benchmark"]
    assert draft["as_of"] == as_of and (bench["window_start"], bench["window_end"]) == window
    span = f"{window[0]} to {window[1]}"
    assert f"| beta vs S&P 500 ({span}) | {bench['beta']:.2f} |" in draft["markdown"]
    assert "| return relative to S&P 500 (same window) |" in draft["markdown"]
    # The command's own output names the window too.
    assert f"beta {bench['beta']:.2f} against the S&P 500" in result.stdout
    assert f"relative return {bench['relative_return'] * 100:+.1f}% ({span})" in result.stdout


def test_a_csv_pair_whose_benchmark_covers_the_year_gets_a_beta(cli: Cli, tmp_path: Path):
    dates = weekdays(400)
    write_csv(tmp_path / "ACME.csv", wavy_series("ACME", dates, 2.0))
    write_csv(tmp_path / "SPX.csv", wavy_series("SPX", dates, 1.0))
    env = {"MA_CSV_DIR": str(tmp_path)}
    draft = cli.ok("analyze", "ACME", "--data", "csv", "--json", extra_env=env).json()["draft"]
    bench = draft["figures"]["benchmark"]
    assert bench is not None and bench["window_end"] == dates[-1]
    assert f"| beta vs S&P 500 ({bench['window_start']} to {dates[-1]}) |" in draft["markdown"]
