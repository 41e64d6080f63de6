"""Figures as an analyst writes them, in every text a person reads: the terminal, the draft's
Markdown, the archived report's Markdown and `reports show`. Prices and moving averages with two
decimals, RSI with one, beta with two, percentages with one; `--json` keeps full precision."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.prices import wavy_series, weekdays, write_csv

PERCENT = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?%")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")
RSI = re.compile(r"RSI\(14\)(?: \||:| of)? (\d+(?:\.\d+)?)")


def _expected(figures: dict) -> list[str]:
    """The figures as the texts must write them, from the full-precision values `--json` gives."""
    written = [f"{figures['price']:.2f}", f"{figures['sma_50']:.2f}", f"{figures['sma_200']:.2f}"]
    written.append(f"RSI(14) {figures['rsi_14']:.1f}")
    written += [f"{figures[k] * 100:+.1f}%" for k in ("return_1m", "return_3m", "return_6m", "return_1y")]
    written += [f"{figures[k] * 100:.1f}%" for k in ("volatility_1y", "max_drawdown_1y")]
    if figures["benchmark"]:
        written.append(f"{figures['benchmark']['beta']:.2f}")
    return written


def _check(text: str, figures: dict, where: str) -> None:
    for percent in PERCENT.findall(text):
        assert re.fullmatch(r"[+-]?\d+\.\d%", percent), f"{where}: {percent} is not one decimal"
    for rsi in RSI.findall(text):
        assert re.fullmatch(r"\d+\.\d", rsi), f"{where}: RSI {rsi} is not one decimal"
    for number in DECIMAL.findall(text):
        assert len(number.split(".")[1]) <= 2, f"{where}: {number} has more than two decimals"
    flat = text.replace("| RSI(14) | ", "RSI(14) ")  # the Markdown table puts the RSI in a cell
    for figure in _expected(figures):
        assert figure in flat, f"{where}: {figure!r} is missing"


def _check_every_text(cli: Cli, *analyze_args: str, extra_env: dict | None = None) -> dict:
    """Analyse, approve, and check the terminal text, the draft's Markdown, the archived Markdown
    and `reports show`; returns the full-precision figures."""
    env = extra_env or {}
    data = cli.ok("analyze", *analyze_args, "--json", extra_env=env).json()
    figures, thread = data["draft"]["figures"], data["thread_id"]
    _check(cli.ok("status", thread, extra_env=env).stdout, figures, "status text")
    _check(data["draft"]["markdown"], figures, "draft Markdown")
    cli.ok("approve", thread, extra_env=env)
    [path] = [p for p in cli.archive_files() if json.loads(p.read_text())["thread_id"] == thread]
    document = json.loads(path.read_text())
    _check(document["markdown"], figures, "archived Markdown")
    _check(cli.ok("reports", "show", document["key"], extra_env=env).stdout, figures, "reports show")
    assert document["report"]["figures"] == figures  # the archive keeps full precision too
    return figures


@pytest.mark.parametrize("ticker", ["NVDA", "MSFT", "NFLX", "TSLA"])
def test_every_text_writes_figures_as_an_analyst_does(cli: Cli, ticker: str):
    figures = _check_every_text(cli, ticker)
    # The JSON keeps what the state holds (four decimals for prices and RSI), not the rounding.
    assert any(len(repr(figures[k]).split(".")[1]) > 2 for k in ("price", "sma_50", "sma_200", "rsi_14"))
    text = cli.ok("analyze", ticker).stdout
    _check(text, figures, "analyze text")


def test_a_beta_is_written_with_two_decimals(cli: Cli, tmp_path: Path):
    dates = weekdays(400)
    write_csv(tmp_path / "ACME.csv", wavy_series("ACME", dates, 2.0))
    write_csv(tmp_path / "SPX.csv", wavy_series("SPX", dates, 1.0))
    env = {"MA_CSV_DIR": str(tmp_path)}
    figures = _check_every_text(cli, "ACME", "--data", "csv", extra_env=env)
    beta = figures["benchmark"]["beta"]
    text = cli.ok("analyze", "ACME", "--data", "csv", extra_env=env).stdout
    assert f"beta {beta:.2f} against the S&P 500" in text
