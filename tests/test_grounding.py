"""The grounding check against a corpus of sentences phrased the way real models write them, each with
its expected verdict: which numbers (if any) no fact supports."""

from __future__ import annotations

import pytest

from market_analyst.analyst import metrics
from market_analyst.analyst.grounding import Facts, figure_facts
from market_analyst.market_data.snapshot import SnapshotProvider

# NVDA's bundled facts (as of 2025-02-14), plus a benchmark comparison as a run whose S&P 500 series
# covers the year would have it, and one tool result.
BENCHMARK = [
    "beta against the S&P 500 (2024-02-14 to 2025-02-14): 1.35",
    "S&P 500 return (2024-02-14 to 2025-02-14): +14.63%",
    "return relative to the S&P 500 (2024-02-14 to 2025-02-14): +77.93%",
    "drawdown_episodes(count=2): "
    '[{"depth_pct": 66.3351, "peak_date": "2021-11-29", "trough_date": "2022-10-14"}]',
]


@pytest.fixture(scope="module")
def facts() -> Facts:
    provider = SnapshotProvider()
    history = provider.load("NVDA")
    figures = metrics.compute_metrics(history, provider.load("SPX"))
    return Facts.of(figure_facts(figures, history.as_of) + BENCHMARK, history.as_of)


CORPUS: list[tuple[str, list[str]]] = [
    # Grounded: cited as given, or rounded to the precision cited.
    ("NVDA is up 92.6% over the past year.", []),
    ("Over the last year the stock returned +92.56%.", []),
    ("The stock has nearly doubled, returning 93% in a year.", []),
    ("The S&P 500 returned 14.6% over the same window, so NVDA beat it by 77.9%.", []),
    ("Annualised volatility of 56.8% is well above the profile's comfort zone.", []),
    ("Volatility runs at about 57%.", []),
    ("An RSI(14) of 56.6 suggests neither overbought nor oversold conditions.", []),
    ("The shares trade 7.1% below their 52-week high.", []),
    ("The price sits 105.8% above the 52-week low.", []),
    ("The 50-day moving average (134.95) is above the 200-day (124.77).", []),
    ("SMA 50 at 135 and SMA 200 at 125 confirm the up trend.", []),
    ("Shares closed at $138.85 on 2025-02-14.", []),
    ("A close of 138.9 leaves the stock near its highs.", []),
    ("Last close: 139.", []),
    ("With a beta of 1.35x, moves amplify the market's.", []),
    ("The 1M return of +1.9% and 3M return of -6.4% show a recent pause.", []),
    ("Over 6M the stock gained 17.6%.", []),
    ("The largest fall over the past year was 27.05%.", []),
    ("The deepest drawdown in five years was 66.3% (2021-11-29 to 2022-10-14).", []),
    ("In 2025 so far the trend remains up.", []),
    ("Momentum over 1Y is strong while 3M is negative.", []),
    ("The stock fell 6.36% over three months.", []),
    ("A drawdown of roughly 27% is deeper than a conservative investor accepts.", []),
    # Ungrounded: figures nobody gave the model.
    ("NVDA could reach 250 by 2026.", ["250", "2026"]),
    ("Volatility of 58% is high.", ["58%"]),
    ("The stock returned 95% over the year.", ["95%"]),
    ("Analysts expect 10-12% annual growth.", ["10", "12%"]),
    ("It outperformed by 150 bps last quarter.", ["150 bps"]),
    ("Since 2023-01-03 the shares have tripled.", ["2023-01-03"]),
    ("Q4 2024 revenue grew 94%.", ["2024", "94%"]),
    ("A price target of 175 implies 26% upside.", ["175", "26%"]),
    ("Beta of 1.5 means high sensitivity.", ["1.5"]),
    ("RSI(14) of 72 signals an overbought stock.", ["72"]),
]


@pytest.mark.parametrize(("sentence", "ungrounded"), CORPUS, ids=[s[:40] for s, _ in CORPUS])
def test_the_corpus(facts: Facts, sentence: str, ungrounded: list[str]):
    assert facts.ungrounded(sentence) == ungrounded


def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 30


@pytest.mark.parametrize(
    ("cited", "fact", "verdict"),
    [
        ("138.9", "138.85", True),
        ("139", "138.85", True),
        ("57", "56.8", True),
        ("58", "56.8", False),
        ("56.80", "56.8", True),
        ("56.9", "56.83", False),
        ("-6.4%", "-6.36%", True),
        ("6.4%", "-6.36%", True),
    ],
)
def test_a_cited_number_matches_the_fact_rounded_to_the_precision_cited(cited: str, fact: str, verdict: bool):
    assert (Facts.of([f"x: {fact}"]).ungrounded(f"y is {cited}") == []) is verdict
