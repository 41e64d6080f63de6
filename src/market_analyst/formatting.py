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


# What an emoji sequence is made of: pictographs, symbols, skin tones and the emoji presentation
# selector. A zero-width joiner between two of them joins them into one picture (a woman and a laptop
# make a technologist); anywhere else it is invisible, and treated as such.
_EMOJI = "[\u2600-\u27bf\u2b00-\u2bff\U0001f000-\U0001faff\ufe0f]"
EMOJI_JOINER = re.compile(f"(?<={_EMOJI})\u200d(?={_EMOJI})")

# C0 and C1 control characters and DEL, except line feed and tab: a terminal would act on them. Then
# the characters that change how text around them reads without being seen: bidirectional
# overrides, embeddings, isolates and marks, zero-width spaces and joiners (but a joiner inside an
# emoji sequence), the word joiner, the byte order mark, and the line and paragraph separators.
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200c\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
    f"|(?<!{_EMOJI})\u200d|\u200d(?!{_EMOJI})"
)


def emoji_joiners(text: str) -> set[int]:
    """Where `text` has a zero-width joiner inside an emoji sequence: the one invisible character a
    text may hold."""
    return {match.start() for match in EMOJI_JOINER.finditer(text)}


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` safe to print on a terminal or show on a page: control characters (an escape sequence
    that clears the screen, a carriage return that overwrites a line) and invisible ones (a
    right-to-left override that reverses what follows, a zero-width space) are shown as `\\x1b` or
    `\\u202e` escapes instead."""
    return _CONTROL.sub(_escape, text)


def describe_age(seconds: float) -> str:
    """An age as people say it: "45 s", "12 min", "5 h", "8 d"."""
    seconds = int(seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


# The role in which someone other than the owner said what a memory of each kind holds.
SPEAKER_ROLES = {"feedback": "reviewer", "rejection": "approver", "approval_note": "approver"}


def who_said(kind: str, said_by: str | None, owner: str | None) -> str:
    """Who said what a memory holds, as a recalled line shows it: "you" for the owner's own words,
    "rev.kim (reviewer)" or "dana (approver)" for someone else's, and who approved a report (whose
    words are the analyst's). A memory recorded without a name says the role alone."""
    if kind == "report":
        return f"approved by {said_by}" if said_by else "a published report"
    role = SPEAKER_ROLES.get(kind)
    if said_by and said_by != owner:
        return f"{said_by} ({role})" if role else said_by
    if said_by == owner or role is None:
        return "you"
    return f"a {role}"
