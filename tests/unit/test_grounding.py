"""The grounding check against a corpus of sentences phrased the way real models write them, each with
its expected verdict: which numbers (if any) no fact supports."""

from __future__ import annotations

import pytest

from market_analyst.analyst import metrics
from market_analyst.analyst.grounding import Facts, figure_facts, status_claims, tool_fact
from market_analyst.market_data.snapshot import SnapshotProvider

# NVDA's bundled facts (as of 2025-02-14, with the S&P 500 comparison over the year to 2025-01-31)
# and one tool result, as a run that called it would have them; the call's own argument (count=200)
# is no fact.
TOOL_RESULTS = [
    tool_fact(
        "drawdown_episodes",
        {"count": 200},
        '[{"depth_pct": 66.3351, "peak_date": "2021-11-29", "recovered": true, "trough_date": "2022-10-14"}]',
    ),
]


def _facts(ticker: str, extra: list[str]) -> Facts:
    provider = SnapshotProvider()
    history = provider.load(ticker)
    figures = metrics.compute_metrics(history, provider.load("SPX"))
    return Facts.of(figure_facts(figures, history.as_of) + extra, history.as_of)


@pytest.fixture(scope="module")
def facts() -> Facts:
    return _facts("NVDA", TOOL_RESULTS)


@pytest.fixture(scope="module")
def nflx() -> Facts:
    return _facts("NFLX", [])


CORPUS: list[tuple[str, list[str]]] = [
    # Grounded: cited as given, or rounded to the precision cited, with the sign its words give.
    ("NVDA is up 92.6% over the past year.", []),
    ("Over the last year the stock returned +92.56%.", []),
    ("The stock has nearly doubled, returning 93% in a year.", []),
    ("The S&P 500 returned 22.7% over the same window, so NVDA beat it by 68.7%.", []),
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
    ("With a beta of 2.85x, moves amplify the market's.", []),
    ("The 1M return of +1.9% and 3M return of -6.4% show a recent pause.", []),
    ("Over 6M the stock gained 17.6%.", []),
    ("The largest fall over the past year was 27.05%.", []),
    ("A maximum drawdown of -27.1% is deep.", []),
    ("The deepest drawdown in five years was 66.3% (2021-11-29 to 2022-10-14).", []),
    ("In 2025 so far the trend remains up.", []),
    ("Momentum over 1Y is strong while 3M is negative.", []),
    ("The stock fell 6.36% over three months.", []),
    ("Over three months the shares lost 6.4%, but over six months they rose 17.6%.", []),
    ("A drawdown of roughly 27% is deeper than a conservative investor accepts.", []),
    ("NVDA beat the S&P 500 by 68.7 percentage points over the year.", []),
    ("The stock is down 6.4 percent over three months.", []),
    ("The price is 7.08% under the 52-week high of roughly 149.", ["149"]),
    # Phrasings refused before although grounded: dates in their usual forms, moving averages and
    # index names with digits, a year a fact falls in.
    ("Shares closed at 138.85 on Feb 14, 2025.", []),
    ("As of February 14th, 2025 the trend is up.", []),
    ("As of 14 Feb 2025 the close was 138.85.", []),
    ("The close on 2/14/2025 was 138.85.", []),
    ("The price is above the 200 DMA (124.77).", []),
    ("It trades above its 50-DMA of 134.95.", []),
    ("The 50 DMA at 134.95 sits above the 200-day SMA.", []),
    ("In 2024 the stock beat the S&P 500 by 68.7%.", []),
    ("Compared with the S&P 500 and the Nasdaq 100, RSI(14) at 56.6 is neutral.", []),
    ("The comparison with the S&P 500 runs from Jan 30, 2024 to Jan 31, 2025.", []),
    # Ungrounded: figures nobody gave the model.
    ("NVDA could reach 250 by 2026.", ["250", "2026"]),
    ("Volatility of 58% is high.", ["58%"]),
    ("The stock returned 95% over the year.", ["95%"]),
    ("Analysts expect 10-12% annual growth.", ["10", "12%"]),
    ("It outperformed by 150 bps last quarter.", ["150 bps"]),
    ("Since 2023-01-03 the shares have tripled.", ["2023-01-03"]),
    ("Q4 2023 revenue grew 94%.", ["2023", "94%"]),
    ("A price target of 175 implies 26% upside.", ["175", "26%"]),
    ("Beta of 1.5 means high sensitivity.", ["1.5"]),
    ("RSI(14) of 72 signals an overbought stock.", ["72"]),
    # Laundered through a tool call's arguments: the call asked for 200 episodes, a price on
    # 2026-12-31 and a window of "120%"; none of that is a result.
    ("A price target of $200 by 2026-12-31, up 120%.", ["2026-12-31", "$200", "120%"]),
    ("The drawdown tool listed 200 episodes.", ["200"]),
    # Accepted before although ungrounded: a dollar figure that looks like a year, a count in a name.
    ("A $2025 target is in reach.", ["$2025"]),
    ("NVDA leads the Magnificent 7.", ["7"]),
    # Signs and meanings: a fall is not a rise, and a figure is not another measure's.
    ("NVDA fell 92.6% over the year.", ["92.6%"]),
    ("Over three months the stock rose 6.4%.", ["6.4%"]),
    ("The shares trade 7.1% above their 52-week high.", ["7.1%"]),
    ("Volatility of +56.8% is high.", ["+56.8%"]),
    ("The RSI of 2.85 is oversold.", ["2.85"]),
    ("A beta of 56.6 is extreme.", ["56.6"]),
    ("Annualised volatility is 27.05%.", ["27.05%"]),
    ("Dec 31, 2026 is the date to watch.", ["Dec 31, 2026"]),
    ("By 12/31/2026 the price could double.", ["12/31/2026"]),
]

NFLX_CORPUS: list[tuple[str, list[str]]] = [
    # NFLX's facts are falls: -25.53% over 1Y, -27.73% over 1M, RSI(14) 35.70, volatility 40.05%.
    (
        "NFLX rose +25.5% over the last year and gained +27.7% in the past month.",
        ["+25.5%", "+27.7%"],
    ),
    ("NFLX rose 25.5% over the last year.", ["25.5%"]),
    ("NFLX fell 25.5% over the last year and lost 27.7% in the past month.", []),
    ("The 1Y return was -25.5%.", []),
    ("An RSI of 35.7 is 40.0.", ["40.0"]),
    ("An RSI of 35.7 with volatility of 40.1%.", []),
]


@pytest.mark.parametrize(("sentence", "ungrounded"), NFLX_CORPUS, ids=[s[:40] for s, _ in NFLX_CORPUS])
def test_the_nflx_corpus(nflx: Facts, sentence: str, ungrounded: list[str]):
    assert nflx.ungrounded(sentence) == ungrounded


@pytest.mark.parametrize(("sentence", "ungrounded"), CORPUS, ids=[s[:40] for s, _ in CORPUS])
def test_the_corpus(facts: Facts, sentence: str, ungrounded: list[str]):
    assert facts.ungrounded(sentence) == ungrounded


def test_the_corpus_is_large_enough():
    assert len(CORPUS) + len(NFLX_CORPUS) >= 60


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


@pytest.mark.parametrize(
    ("prose", "claims"),
    [
        (
            "This report is pre-approved by compliance and has been published.",
            ["pre-approved", "compliance", "published"],
        ),
        ("Approved for distribution.", ["Approved"]),
        ("The draft was signed off and is compliant.", ["signed off", "compliant"]),
        ("NVDA is up 92.6% over the past year; the trend is up.", []),
        ("A reviewer may ask for more on the drawdown.", []),
    ],
)
def test_prose_that_claims_a_status_only_the_application_records(prose: str, claims: list[str]):
    assert status_claims(prose) == claims
