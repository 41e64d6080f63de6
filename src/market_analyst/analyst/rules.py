"""The built-in deterministic analyst: figures plus a risk profile in, recommendation out.

Risk tolerance sets the limits (volatility, drawdown) and the score a recommendation needs;
the horizon sets how much short against long returns count. Same input, same output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from market_analyst.formatting import pct
from market_analyst.state import Profile

RULES_VERSION = "1"
ANALYST = {"kind": "rules", "name": "built-in rules", "version": RULES_VERSION}


@dataclass(frozen=True)
class RiskLimits:
    """What one risk tolerance accepts, and the scores that make a buy or a sell."""

    max_volatility: float
    max_drawdown: float
    buy_above: float
    sell_below: float
    penalty_weight: float


LIMITS: dict[str, RiskLimits] = {
    "conservative": RiskLimits(0.25, 0.15, buy_above=0.50, sell_below=-0.10, penalty_weight=1.5),
    "moderate": RiskLimits(0.40, 0.30, buy_above=0.35, sell_below=-0.30, penalty_weight=1.0),
    "aggressive": RiskLimits(0.70, 0.50, buy_above=0.20, sell_below=-0.50, penalty_weight=0.5),
}

# Weight of the 1M, 3M, 6M and 1Y returns in the momentum score, by horizon.
HORIZON_WEIGHTS: dict[str, dict[str, float]] = {
    "short": {"return_1m": 0.50, "return_3m": 0.30, "return_6m": 0.15, "return_1y": 0.05},
    "medium": {"return_1m": 0.15, "return_3m": 0.30, "return_6m": 0.30, "return_1y": 0.25},
    "long": {"return_1m": 0.05, "return_3m": 0.15, "return_6m": 0.30, "return_1y": 0.50},
}


def _a(word: str) -> str:
    """The word with its indefinite article: "a moderate", "an aggressive"."""
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _momentum(figures: dict[str, Any], weights: dict[str, float]) -> float:
    """Horizon-weighted returns, each squashed so one outlier cannot decide alone."""
    used = {k: w for k, w in weights.items() if figures.get(k) is not None}
    total_weight = sum(used.values())
    if not used:
        return 0.0
    return sum(w * math.tanh(float(figures[k]) / 0.25) for k, w in used.items()) / total_weight


def _rsi_score(figures: dict[str, Any], risks: list[str]) -> float:
    """A contrarian nudge at RSI extremes, with the risk it signals."""
    rsi_value = figures.get("rsi_14")
    if rsi_value is not None and rsi_value > 70:
        risks.append(f"RSI(14) of {rsi_value:.1f} is above 70: the recent rise may be overextended")
        return -0.15
    if rsi_value is not None and rsi_value < 30:
        risks.append(f"RSI(14) of {rsi_value:.1f} is below 30: selling pressure has been heavy")
        return 0.15
    return 0.0


def _limit_penalty(figures: dict[str, Any], limits: RiskLimits, tolerance: str, risks: list[str]) -> float:
    """How far volatility and drawdown exceed what the profile accepts, with a risk line for each."""
    penalty = 0.0
    volatility = figures.get("volatility_1y")
    if volatility is not None:
        excess = volatility / limits.max_volatility - 1.0
        if excess > 0:
            penalty += limits.penalty_weight * min(excess, 1.5) * 0.4
        verdict = "exceeds" if excess > 0 else "is within"
        risks.append(
            f"annualised volatility of {pct(volatility)} {verdict} the {pct(limits.max_volatility)} "
            f"{_a(tolerance)} profile accepts"
        )
    drawdown = float(figures.get("max_drawdown_1y") or 0.0)
    if drawdown > limits.max_drawdown:
        penalty += limits.penalty_weight * min(drawdown / limits.max_drawdown - 1.0, 1.5) * 0.4
        risks.append(
            f"the largest fall in the past year, {pct(drawdown)}, is deeper than the "
            f"{pct(limits.max_drawdown)} {_a(tolerance)} profile accepts"
        )
    return penalty


def _market_risks(figures: dict[str, Any], risks: list[str]) -> None:
    """Risks that do not move the score: a high beta, a price far below its high."""
    benchmark = figures.get("benchmark")
    if isinstance(benchmark, dict) and benchmark.get("beta") is not None and benchmark["beta"] > 1.3:
        risks.append(
            f"beta of {benchmark['beta']:.2f} against the S&P 500 "
            f"({benchmark['window_start']} to {benchmark['window_end']}): moves amplify the market's"
        )
    from_high = figures.get("from_52w_high")
    if from_high is not None and from_high < -0.2:
        risks.append(f"the price is {pct(-from_high)} below its 52-week high")


def _decide(score: float, limits: RiskLimits, risks: list[str]) -> tuple[str, float]:
    """The recommendation the score earns, and a confidence that grows with the margin."""
    if score >= limits.buy_above:
        recommendation, margin = "buy", score - limits.buy_above
    elif score <= limits.sell_below:
        recommendation, margin = "sell", limits.sell_below - score
    else:
        recommendation = "hold"
        margin = min(score - limits.sell_below, limits.buy_above - score)
    breaches = sum(1 for r in risks if "exceeds" in r or "deeper than" in r)
    confidence = 0.5 + 0.4 * math.tanh(margin / 0.3) - 0.08 * breaches
    return recommendation, round(min(0.95, max(0.2, confidence)), 2)


def analyse(figures: dict[str, Any], profile: Profile) -> dict[str, Any]:
    """Score the figures against the profile and return recommendation, confidence and risks."""
    limits = LIMITS[profile.risk_tolerance]
    tolerance = profile.risk_tolerance
    momentum = _momentum(figures, HORIZON_WEIGHTS[profile.horizon])
    trend_score = {"up": 0.25, "down": -0.25}.get(str(figures.get("trend")), 0.0)
    risks: list[str] = []
    rsi_score = _rsi_score(figures, risks)
    penalty = _limit_penalty(figures, limits, tolerance, risks)
    _market_risks(figures, risks)
    score = round(momentum + trend_score + rsi_score - penalty, 6)
    recommendation, confidence = _decide(score, limits, risks)
    return {
        "recommendation": recommendation,
        "confidence": confidence,
        "score": score,
        "risk_factors": risks,
        "analyst": dict(ANALYST),
        "framing": (
            f"Judged for {_a(tolerance)} investor with a {profile.horizon} horizon: buy at a score of "
            f"{limits.buy_above:+.2f} or more, sell at {limits.sell_below:+.2f} or less; "
            f"volatility limit {pct(limits.max_volatility)}, drawdown limit {pct(limits.max_drawdown)}."
        ),
    }


class RulesAnalyst:
    """The built-in analyst as the graph sees it (`ports.Analyst`): feedback cannot change its figures."""

    def analyse(
        self, ticker: str, figures: dict[str, Any], profile: Profile, feedback: list[str]
    ) -> dict[str, Any]:
        """The rules' judgement of `figures` for `profile`."""
        return analyse(figures, profile)
