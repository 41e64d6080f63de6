"""Grounding: every number a model writes must be one the facts it was given contain.

A fact carries its value with its sign, its unit (percent or not) and, where its words say so, what it
measures (a return, volatility, a drawdown, a price, RSI, beta). A number the model cites is read the
same way: its unit, a sign written or implied by its words ("fell 6.4%", "7.1% below its high" are
falls; "rose", "gained", "above" are rises) and the measure its clause names. It is grounded when a
fact of the same unit and a compatible measure, rounded to the precision cited, equals it, with the
same sign where the fact has one: 138.9 and 139 match 138.85; 57 matches 56.84; 58 does not;
"rose 25.5%" does not match a fall of 25.53%. Figures without a sign (volatility, drawdowns, prices)
take none: "+27%" is not a drawdown of 27%.

Numbers inside names are not figures ("S&P 500", "RSI(14)", "52-week", "50-day", "SMA 200", "200 DMA",
"50-DMA", "1M"/"1Y", "Q4"). Dates count in the usual forms ("2025-02-14", "Feb 14, 2025",
"14 February 2025", "2/14/2025") only if a fact names that day; a bare year ("in 2024") only if a fact
date falls in it, or it is the as-of year. A number with a dollar sign ("$2025") is a price.

Facts are lines in one format ("label: value"); a tool's line carries its JSON result after
" returned: ", and only that result is read, never the arguments the model called it with.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

# Names that carry digits without being figures. Their digits are dropped and their words kept, so
# "RSI(14) of 56.6" still says what 56.6 measures.
_NAMES = [
    r"S\s*&\s*P\s*500",
    r"\b(?:Nasdaq|NASDAQ|FTSE|Dow|Russell|DAX|Nikkei|Euro\s?Stoxx)[- ]?\d+\b",
    r"\bRSI\s*\(\s*\d+\s*\)",
    r"\bRSI[- ]?\d+\b",
    r"\b(?:SMA|EMA|DMA|MA)\s*\(\s*\d+\s*\)",
    r"\b(?:SMA|EMA|DMA|MA)[- ]?\d+\b",
    r"\b\d+[- ]?(?:SMA|EMA|DMA|MA)\b",
    r"\b\d+[- ](?:trading[- ])?(?:day|week|month|year|quarter)s?\b",
    r"\b\d+[DWMQY]\b",
    r"\bQ[1-4]\b",
]
_NAME = re.compile("|".join(_NAMES), re.IGNORECASE)

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_DATES = [
    re.compile(r"\b(?P<year>\d{4})-(?P<m>\d{2})-(?P<day>\d{2})\b"),
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+(?P<year>\d{{4}})\b", re.IGNORECASE),
    re.compile(rf"\b{_DAY}\s+{_MONTH},?\s+(?P<year>\d{{4}})\b", re.IGNORECASE),
    re.compile(r"\b(?P<m>\d{1,2})/(?P<day>\d{1,2})/(?P<year>\d{4})\b"),
]

# A number: optional sign (not a range dash between digits), a dollar sign, thousands separators,
# decimals, and a unit.
_NUMBER = re.compile(
    r"(?<![\w.$])(?P<sign>[-+\u2212](?=\$?\d))?(?P<dollar>\$)?(?P<digits>\d{1,3}(?:,\d{3})+|\d+)"
    r"(?P<fraction>\.\d+)?(?![\d])"
    r"(?P<unit>\s?(?:%|percentage points?\b|percent\b|per cent\b|pct\b|pp\b|bps\b|bp\b|basis points\b"
    r"|x\b|\u00d7))?",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z]+(?:-[a-z]+)*", re.IGNORECASE)
# Where one clause ends and the next begins: a sign or a measure does not carry across.
_CLAUSE = re.compile(r"[,;:.!?()\[\]]\s|[;!?()\[\]]|\b(?:and|but|while|whereas|although|versus|vs)\b")

_FALLS = frozenset(
    "fell fall falls falling fallen drop drops dropped dropping decline declines declined declining "
    "down lost lose loses losing loss losses slid slide slides slipped sank sunk shed tumbled plunged "
    "plunge slumped retreated underperformed underperform underperforming lagged lag lags trailed "
    "trails negative lower below under beneath minus decrease decreased".split()
)
_RISES = frozenset(
    "rose rise rises rising risen gained gain gains gaining up climbed climb climbs grew grow grows "
    "jumped surged rallied advanced outperformed outperform outperforming beat beating ahead positive "
    "higher above plus increase increased added".split()
)
_NEUTRAL = frozenset("returned return returns returning changed change moved".split())
_AFTER_FALLS = frozenset("below under beneath lower down".split())
_AFTER_RISES = frozenset("above higher up ahead".split())

_MEASURES = [
    ("rsi", re.compile(r"\brsi\b", re.IGNORECASE)),
    ("volatility", re.compile(r"\bvolatil", re.IGNORECASE)),
    ("beta", re.compile(r"\bbeta\b", re.IGNORECASE)),
    ("drawdown", re.compile(r"\bdrawdowns?\b|peak-to-trough", re.IGNORECASE)),
    ("price", re.compile(r"\b(?:sma|ema|dma|moving averages?|closed?|closing)\b", re.IGNORECASE)),
    ("return", re.compile(r"\breturn(?:s|ed|ing)?\b", re.IGNORECASE)),
]
# What each key of a tool's JSON result measures, and whether its value is a change (has a sign).
_RESULT_KEYS: dict[str, tuple[str, str, bool]] = {
    "return_pct": ("return", "%", True),
    "benchmark_return_pct": ("return", "%", True),
    "relative_return_pct": ("return", "%", True),
    "volatility_pct": ("volatility", "%", False),
    "max_drawdown_pct": ("drawdown", "%", False),
    "depth_pct": ("drawdown", "%", False),
    "beta": ("beta", "", False),
    "close": ("price", "", False),
}
TOOL_RESULT = " returned: "


@dataclass(frozen=True)
class Cited:
    """A number as written: its magnitude (percent units for %, bps converted to percent), decimals,
    unit ("%", "$" or ""), sign (+1 or -1 written or implied by its words, 0 for none), whether the
    sign was written, and the measure its clause names (None when it names none)."""

    text: str
    value: Decimal
    places: int
    unit: str
    sign: int
    written_sign: bool
    measure: str | None


@dataclass(frozen=True)
class Fact:
    """One figure the model may cite: its value with its sign, its unit, what it measures (None: not
    said), and whether it is a change whose sign is part of it."""

    value: Decimal
    unit: str
    measure: str | None
    signed: bool

    def grounds(self, cited: Cited) -> bool:
        """Whether `cited` is this figure, written to its own precision."""
        if (cited.unit == "%") != (self.unit == "%"):
            return False
        if cited.measure and self.measure and cited.measure != self.measure:
            return False
        if self.signed:
            if cited.sign and self.value and (cited.sign > 0) != (self.value > 0):
                return False
        elif cited.written_sign and not (cited.sign < 0 and self.measure == "drawdown"):
            return False
        half_step = Decimal(5) / Decimal(10) ** (cited.places + 1)
        return abs(abs(self.value) - cited.value) <= half_step


def _iso(match: re.Match[str]) -> str | None:
    groups = match.groupdict()
    month = int(groups["m"]) if groups.get("m") else _MONTHS[groups["month"].lower().rstrip(".")]
    try:
        return date(int(groups["year"]), month, int(groups["day"])).isoformat()
    except ValueError:
        return None


def find_dates(text: str) -> tuple[list[tuple[str, str]], str]:
    """The dates in `text` as (as written, ISO day or "" when no such day), and `text` without them."""
    found: list[tuple[str, str]] = []
    for pattern in _DATES:

        def take(match: re.Match[str]) -> str:
            found.append((match.group(), _iso(match) or ""))
            return " date "

        text = pattern.sub(take, text)
    return found, text


def _strip_names(text: str) -> str:
    return _NAME.sub(lambda m: re.sub(r"\d", "", m.group()), text)


def _direction(before: str, after: str) -> int:
    words = [w.lower() for w in _WORD.findall(before)]
    for word in reversed(words):
        if word in _FALLS:
            return -1
        if word in _RISES:
            return 1
        if word in _NEUTRAL:
            break
    following = _WORD.findall(after[:24])
    if following and following[0].lower() in _AFTER_FALLS:
        return -1
    if following and following[0].lower() in _AFTER_RISES:
        return 1
    return 0


def _measure(before: str) -> str | None:
    best: tuple[int, str] | None = None
    for name, pattern in _MEASURES:
        for match in pattern.finditer(before):
            if best is None or match.start() > best[0]:
                best = (match.start(), name)
    return best[1] if best else None


def cited_numbers(text: str) -> list[Cited]:
    """Every number in `text` (dates and names already taken out), read with its unit, sign and measure."""
    found = []
    previous_end = 0
    for match in _NUMBER.finditer(text):
        clause_start = previous_end
        for boundary in _CLAUSE.finditer(text, previous_end, match.start()):
            clause_start = boundary.end()
        before = text[clause_start : match.start()]
        digits = match["digits"].replace(",", "") + (match["fraction"] or "")
        value = Decimal(digits)
        places = len(match["fraction"]) - 1 if match["fraction"] else 0
        unit_word = (match["unit"] or "").strip().lower()
        if unit_word in ("bps", "bp", "basis points"):
            value, places, unit = value / 100, places + 2, "%"
        elif unit_word in ("%", "percent", "per cent", "pct", "pp") or unit_word.startswith("percentage"):
            unit = "%"
        else:
            unit = "$" if match["dollar"] else ""
        written = match["sign"]
        sign = (-1 if written in "-\u2212" else 1) if written else _direction(before, text[match.end() :])
        found.append(Cited(match.group().strip(), value, places, unit, sign, bool(written), _measure(before)))
        previous_end = match.end()
    return found


def _result_facts(data: Any, key: str | None = None) -> tuple[list[Fact], set[str]]:
    """The figures and dates of a tool's JSON result, each measured by its key."""
    facts: list[Fact] = []
    dates: set[str] = set()
    if isinstance(data, dict):
        for name, value in data.items():
            sub_facts, sub_dates = _result_facts(value, name)
            facts += sub_facts
            dates |= sub_dates
    elif isinstance(data, list):
        for item in data:
            sub_facts, sub_dates = _result_facts(item, key)
            facts += sub_facts
            dates |= sub_dates
    elif isinstance(data, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", data):
        dates.add(data)
    elif isinstance(data, int | float) and not isinstance(data, bool) and key in _RESULT_KEYS:
        measure, unit, signed = _RESULT_KEYS[key]
        facts.append(Fact(Decimal(str(data)), unit, measure, signed))
    return facts, dates


def _line_facts(line: str) -> tuple[list[Fact], set[str]]:
    _, separator, result = line.rpartition(TOOL_RESULT)
    if separator:
        try:
            return _result_facts(json.loads(result))
        except ValueError:
            return [], set()  # a tool result that is not JSON grounds nothing
    dates, rest = find_dates(line)
    label, separator, value = rest.partition(": ")
    if not separator:
        label, value = "", rest
    # A figure line's label says what its value measures ("annualised volatility over 1Y: 56.83%");
    # a line of prose (the rules' framing) says it clause by clause.
    label_measure = _measure(_strip_names(label))
    facts = [
        Fact(
            -n.value if n.sign < 0 and n.written_sign else n.value,
            "%" if n.unit == "%" else "",
            label_measure or n.measure,
            n.written_sign,
        )
        for n in cited_numbers(_strip_names(value))
    ]
    return facts, {iso for _, iso in dates if iso}


@dataclass(frozen=True)
class Facts:
    """The figures and dates the facts contain, ready to check cited numbers against."""

    figures: tuple[Fact, ...]
    dates: frozenset[str]
    as_of_year: str | None

    @classmethod
    def of(cls, lines: list[str], as_of: str | None = None) -> Facts:
        """The facts of these lines (figure lines and tool results); `as_of` is the run's as-of date."""
        figures: list[Fact] = []
        dates: set[str] = set()
        for line in lines:
            line_figures, line_dates = _line_facts(line)
            figures += line_figures
            dates |= line_dates
        return cls(tuple(figures), frozenset(dates), as_of[:4] if as_of else None)

    def _year_grounded(self, year: str) -> bool:
        return year == self.as_of_year or any(d.startswith(year) for d in self.dates)

    def ungrounded(self, text: str) -> list[str]:
        """The numbers and dates in `text` that no fact supports, as written."""
        dates, rest = find_dates(text)
        bad = [written for written, iso in dates if iso not in self.dates]
        for cited in cited_numbers(_strip_names(rest)):
            is_year = (
                cited.unit == ""
                and cited.places == 0
                and not cited.written_sign
                and re.fullmatch(r"(?:19|20)\d\d", cited.text) is not None
            )
            if is_year:
                if not self._year_grounded(cited.text):
                    bad.append(cited.text)
            elif not any(fact.grounds(cited) for fact in self.figures):
                bad.append(cited.text)
        return bad


# -- claims only the application may make ----------------------------------------------------------

_STATUS_CLAIM = re.compile(
    r"\b(?:pre-?approved|approved|approval|sign(?:ed)?[- ]off|published|publication|"
    r"compliance|compliant|cleared\s+(?:by|for)|authori[sz]ed|vetted|endorsed|certified)\b",
    re.IGNORECASE,
)


def status_claims(text: str) -> list[str]:
    """The words in `text` that claim an approval, a publication or a compliance status: only the
    application records those, at the gate, so no analysis may state them."""
    return [m.group() for m in _STATUS_CLAIM.finditer(text)]


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


def tool_fact(name: str, arguments: dict[str, Any], result: str) -> str:
    """A tool's result as one fact line: the call, for the reader, then the result, which alone is read."""
    shown_args = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(arguments.items()))
    return f"{name}({shown_args}){TOOL_RESULT}{result}"
