"""The chart: the coarse series the draft keeps, and the SVG drawn from it, the same bytes every time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from market_analyst.analyst import chart_data
from market_analyst.analyst.metrics import compute_metrics, max_drawdown
from market_analyst.market_data.snapshot import SnapshotProvider
from market_analyst.web.chart import chart_svg


@pytest.mark.parametrize("count", [1, 2, 3, 127, 128, 129, 253, 1000])
def test_sampled_indexes_keep_the_last_day_and_stay_few(count: int):
    picked = chart_data.sample_indexes(10, 10 + count - 1)
    assert picked[-1] == 10 + count - 1 and picked[0] >= 10
    assert len(picked) <= chart_data.MAX_POINTS and picked == sorted(set(picked))
    if count <= chart_data.MAX_POINTS:
        assert len(picked) == count


def test_rolling_means():
    assert chart_data.rolling_means([1.0, 2.0, 3.0, 4.0], 2) == [None, 1.5, 2.5, 3.5]


def test_the_series_is_the_analysed_year_with_the_figures_drawdown():
    history = SnapshotProvider().load("NVDA")
    chart = chart_data.chart_series(history)
    figures = compute_metrics(history, None)
    assert chart["start"] == history.dates[-253] and chart["days"][0] == 0
    assert len(chart["days"]) == len(chart["close"]) == len(chart["sma_50"]) == len(chart["sma_200"]) == 127
    last = chart["days"][-1]
    assert chart["close"][-1] == pytest.approx(figures["price"], rel=1e-4) and last == 367  # 2025-02-14
    assert chart["sma_50"][-1] == pytest.approx(figures["sma_50"], rel=1e-4)
    assert chart["sma_200"][-1] == pytest.approx(figures["sma_200"], rel=1e-4)
    drawdown = chart["drawdown"]
    assert drawdown["depth"] == figures["max_drawdown_1y"] == round(max_drawdown(history.closes), 6)
    assert chart["start"] <= drawdown["peak"] < drawdown["trough"] <= history.as_of
    peak, trough = history.dates.index(drawdown["peak"]), history.dates.index(drawdown["trough"])
    assert 1 - history.closes[trough] / history.closes[peak] == pytest.approx(drawdown["depth"], abs=1e-6)


_DRAW = """
import sys
from pathlib import Path
from market_analyst.analyst.chart_data import chart_series
from market_analyst.market_data.snapshot import SnapshotProvider
from market_analyst.web.chart import chart_svg
sys.stdout.buffer.write(chart_svg(chart_series(SnapshotProvider().load("TSLA")), "TSLA", Path(sys.argv[1])))
"""


def test_the_svg_is_the_same_bytes_in_another_process(tmp_path: Path):
    chart = chart_data.chart_series(SnapshotProvider().load("TSLA"))
    here = chart_svg(chart, "TSLA", tmp_path / "mpl")
    there = subprocess.run(
        [sys.executable, "-c", _DRAW, str(tmp_path / "mpl-2")], capture_output=True, check=True, timeout=120
    ).stdout
    assert here == there
    text = here.decode()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "<script" not in text and "<dc:date>" not in text
    assert (tmp_path / "mpl").is_dir()  # matplotlib's cache went to the private directory
