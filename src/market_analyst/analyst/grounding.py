"""Grounding: every number a model writes must come from the facts it was given.

Facts are lines in one format (returns as signed percentages, volatility and drawdown unsigned, prices
plain). A number the model cites is grounded when some fact's number, rounded to the precision cited,
equals it: 138.9 and 139 match 138.85; 57 matches 56.84; 58 does not. Numbers inside names are not
figures ("S&P 500", "RSI(14)", "52-week", "50-day", "SMA 200", "1M"/"1Y", the as-of year), and a
date counts only if a fact names it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

# Names that carry digits without being figures. Order matters: longer names first.
_NAMES = [
    r"S\s*&\s*P\s*500",
    r"\bRSI\s*\(\s*\d+\s*\)",
    r"\bRSI[- ]?\d+\b",
    r"\b(?:SMA|EMA|MA|DMA)[- ]?\d+\b",
    r"\b\d+[- ](?:trading[- ])?(?:day|week|month|year|quarter)s?\b",
    r"\b\d+[DWMQY]\b",
    r"\bQ[1-4]\b",
]
_NAME = re.compile("|".join(_NAMES), re.IGNORECASE)
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
# A number: optional sign (not a range dash between digits), thousands separators, decimals, and a unit.
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+\u2212](?=\d))?\$?(?P<digits>\d{1,3}(?:,\d{3})+|\d+)(?P<fraction>\.\d+)?"
    r"(?P<unit>\s?(?:%|percent\b|bps\b|bp\b|basis points\b|x\b|×))?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Cited:
    """A number as written: its value (percent units for %, bps converted to percent) and decimals."""

    text: str
    value: Decimal
    places: int


def _numbers(text: str) -> list[Cited]:
    found = []
    for match in _NUMBER.finditer(text):
        digits = match["digits"].replace(",", "") + (match["fraction"] or "")
        value = Decimal(digits)
        places = len(match["fraction"]) - 1 if match["fraction"] else 0
        unit = (match["unit"] or "").strip().lower()
        if unit in ("bps", "bp", "basis points"):
            value, places = value / 100, places + 2
        found.append(Cited(match.group().strip(), value, places))
    return found


def strip_names(text: str, as_of_year: str | None) -> str:
    """`text` without the digits that belong to names (and to the as-of year)."""
    text = _NAME.sub(" ", text)
    if as_of_year:
        text = re.sub(rf"(?<![\d-]){re.escape(as_of_year)}(?![\d-])", " ", text)
    return text


@dataclass(frozen=True)
class Facts:
    """The numbers and dates the facts contain, ready to check cited numbers against."""

    values: tuple[Decimal, ...]
    dates: frozenset[str]
    as_of_year: str | None

    @classmethod
    def of(cls, lines: list[str], as_of: str | None = None) -> Facts:
        year = as_of[:4] if as_of else None
        dates = frozenset(d for line in lines for d in _DATE.findall(line))
        values = tuple(
            abs(n.value) for line in lines for n in _numbers(strip_names(_DATE.sub(" ", line), year))
        )
        return cls(values, dates, year)

    def grounds(self, cited: Cited) -> bool:
        half_step = Decimal(5) / Decimal(10) ** (cited.places + 1)
        return any(abs(fact - abs(cited.value)) <= half_step for fact in self.values)

    def ungrounded(self, text: str) -> list[str]:
        """The numbers and dates in `text` that no fact supports, as written."""
        bad = [d for d in _DATE.findall(text) if d not in self.dates]
        rest = strip_names(_DATE.sub(" ", text), self.as_of_year)
        return bad + [n.text for n in _numbers(rest) if not self.grounds(n)]


# -- the facts a run gives the model -----------------------------------------------------------------


def _signed(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{fraction * 100:+.2f}%"


def _unsigned(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{abs(fraction) * 100:.2f}%"


def figure_facts(figures: dict[str, Any], as_of: str) -> list[str]:
    """The run's figures as fact lines, in the one format the grounding check reads."""
    f = figures
    lines = [
        f"last close ({as_of}): {f['price']:.2f}",
        *(f"return over {w.upper()}: {_signed(f.get(f'return_{w}'))}" for w in ("1m", "3m", "6m", "1y")),
        f"annualised volatility over 1Y: {_unsigned(f.get('volatility_1y'))}",
        f"largest fall over 1Y (maximum drawdown): {_unsigned(f.get('max_drawdown_1y'))}",
        f"SMA 50: {f['sma_50']:.2f}" if f.get("sma_50") is not None else "SMA 50: n/a",
        f"SMA 200: {f['sma_200']:.2f}" if f.get("sma_200") is not None else "SMA 200: n/a",
        f"trend: {f.get('trend')}",
        f"RSI(14): {f['rsi_14']:.2f}" if f.get("rsi_14") is not None else "RSI(14): n/a",
        f"distance from the 52-week high: {_signed(f.get('from_52w_high'))}",
        f"distance from the 52-week low: {_signed(f.get('from_52w_low'))}",
    ]
    bench = f.get("benchmark")
    if isinstance(bench, dict):
        window = f"{bench['window_start']} to {bench['window_end']}"
        lines += [
            f"beta against the S&P 500 ({window}): {bench['beta']:.2f}",
            f"S&P 500 return ({window}): {_signed(bench['benchmark_return'])}",
            f"return relative to the S&P 500 ({window}): {_signed(bench['relative_return'])}",
        ]
    else:
        lines.append(
            f"benchmark comparison: none, because {f.get('benchmark_note') or 'there is no S&P 500 series'}"
        )
    return lines


def tool_fact(name: str, arguments: dict[str, Any], result: Any) -> str:
    """A tool's result as one fact line."""
    shown_args = ", ".join(f"{k}={v}" for k, v in sorted(arguments.items()))
    return f"{name}({shown_args}): {result}"
