"""How figures are written in drafts and on the terminal, in one place."""

from __future__ import annotations

import re
from typing import Any


def signed_pct(value: Any) -> str:
    """A fraction as a signed percentage with one decimal ("+92.6%"), or "n/a"."""
    return "n/a" if value is None else f"{float(value) * 100:+.1f}%"


def pct(value: Any) -> str:
    """A fraction as a percentage with one decimal ("56.8%"), or "n/a"."""
    return "n/a" if value is None else f"{float(value) * 100:.1f}%"


def price(value: Any) -> str:
    """A price or a moving average with two decimals ("138.85"), or "n/a"."""
    return "n/a" if value is None else f"{float(value):.2f}"


def one_decimal(value: Any) -> str:
    """An index such as RSI with one decimal ("56.6"), or "n/a"."""
    return "n/a" if value is None else f"{float(value):.1f}"


def two_decimals(value: Any) -> str:
    """A ratio such as beta with two decimals ("1.35"), or "n/a"."""
    return "n/a" if value is None else f"{float(value):.2f}"


# C0 and C1 control characters and DEL, except line feed and tab: a terminal would act on them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` safe to print on a terminal: control characters (an escape sequence that clears the
    screen, a carriage return that overwrites a line) are shown as `\\x1b`-style escapes instead."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def describe_age(seconds: float) -> str:
    """An age as people say it: "45 s", "12 min", "5 h", "8 d"."""
    seconds = int(seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
