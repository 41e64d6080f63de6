"""The price chart of a draft, drawn server-side as SVG with matplotlib from the series the draft
keeps (`analyst.chart_data`): the close, the 50- and 200-day averages, the largest drawdown shaded.

Deterministic: the same series gives the same bytes in any process (a fixed `svg.hashsalt`, no date
in the metadata, text drawn as paths with matplotlib's bundled font). No script is drawn into it, and
pages show it through `<img>`, where an SVG runs nothing anyway.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import threading
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from market_analyst.files import private_dir
from market_analyst.formatting import pct

_LOCK = threading.Lock()  # matplotlib's settings are global; one drawing at a time
_RC = {
    "svg.hashsalt": "market-analyst",
    "svg.fonttype": "path",
    "text.parse_math": False,  # a "$" in a label is text, never TeX
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
COLORS = {"close": "#1f4e79", "sma_50": "#d9822b", "sma_200": "#5b8c3a", "drawdown": "#c0392b"}


def _matplotlib(config_dir: Path) -> Any:
    # matplotlib reads its cache directory only from the environment, when first imported; a private
    # directory keeps its font cache out of a home that may not be writable.
    private_dir(config_dir, "the chart cache")
    os.environ.setdefault("MPLCONFIGDIR", str(config_dir))
    import matplotlib

    matplotlib.use("Agg")
    return matplotlib


def _draw(chart: dict[str, Any], title: str, config_dir: Path) -> bytes:
    matplotlib = _matplotlib(config_dir)
    from matplotlib.dates import AutoDateLocator, DateFormatter, date2num
    from matplotlib.figure import Figure

    start = date.fromisoformat(chart["start"])
    days = date2num([start + timedelta(days=offset) for offset in chart["days"]])
    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=(8, 3.4), dpi=100, layout="constrained")
        axes = figure.add_subplot()
        drawdown = chart["drawdown"]
        if drawdown["depth"] > 0:
            axes.axvspan(
                float(date2num(date.fromisoformat(drawdown["peak"]))),
                float(date2num(date.fromisoformat(drawdown["trough"]))),
                color=COLORS["drawdown"],
                alpha=0.15,
                lw=0,
                label=f"largest drawdown ({pct(drawdown['depth'])})",
            )
        axes.plot(days, chart["close"], color=COLORS["close"], lw=1.4, label="close")
        for days_back, style in ((50, "-"), (200, "--")):
            series = [float("nan") if v is None else v for v in chart[f"sma_{days_back}"]]
            axes.plot(
                days,
                series,
                color=COLORS[f"sma_{days_back}"],
                lw=1.1,
                ls=style,
                label=f"{days_back}-day average",
            )
        axes.xaxis.set_major_locator(AutoDateLocator(maxticks=8))
        axes.xaxis.set_major_formatter(DateFormatter("%b %Y"))
        axes.set_title(title, loc="left")
        axes.grid(True, color="#e5e5e5", lw=0.6)
        axes.legend(loc="upper left", ncols=2, framealpha=0.85, edgecolor="none")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


@functools.lru_cache(maxsize=64)
def _cached(chart_json: str, title: str, config_dir: str) -> bytes:
    with _LOCK:
        return _draw(json.loads(chart_json), title, Path(config_dir))


def chart_svg(chart: dict[str, Any], title: str, config_dir: Path) -> bytes:
    """The chart as SVG bytes; the same series and title give the same bytes."""
    return _cached(json.dumps(chart, sort_keys=True), title, str(config_dir))


def chart_title(report: dict[str, Any]) -> str:
    """The chart's title: the ticker and the year it shows."""
    chart = report["chart"]
    end = date.fromisoformat(chart["start"]) + timedelta(days=chart["days"][-1])
    return f"{report['ticker']}: {chart['start']} to {end.isoformat()}"


def chart_data_uri(chart: dict[str, Any], title: str, config_dir: Path) -> str:
    """The chart as a `data:` URI, for a page that must stand alone."""
    return "data:image/svg+xml;base64," + base64.b64encode(chart_svg(chart, title, config_dir)).decode()
