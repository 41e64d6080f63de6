"""Display text shared by the draft and the terminal: the report's Markdown and the profile sentence.

Every piece of text the report quotes (the question, reviewer feedback, the analyst's headline,
summary, risk factors and answers, which may be a model's words) goes in through `plain`: it stays
one line of literal text, so it can add no heading, table, list, emphasis, link or image to the
report, in any Markdown renderer, and what cannot be seen is shown as an escape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from market_analyst.formatting import one_decimal, pct, price, printable, signed_pct, two_decimals
from market_analyst.state import ProfileUsed

_LINE_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x85\u2028\u2029]")
# Markdown punctuation that means something anywhere in a line (emphasis, code, links, images, raw
# HTML, tables, strikethrough, headings), and the backslash that escapes it.
# (An underscore inside a word, as in a user ID, is no emphasis, so it stays as it is.)
_INLINE = re.compile(r"([\\`*\[\]<>|~#]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
_ENTITY = re.compile(r"&(?=#?[0-9A-Za-z]+;)")  # "&lt;" would be read as "<"
_AUTOLINK = re.compile(r"(?<=[A-Za-z])(?=://)|(?<=\bwww)(?=\.)", re.IGNORECASE)
# What makes a block when it starts a line: a list item, an ordered item, a rule or a setext heading.
_BLOCK_START = re.compile(r"^(\s*)([-+=]|\d+(?=[.)]))")


def plain(text: Any) -> str:
    """`text` as literal Markdown: one line (line breaks become spaces), every character that could
    be markup escaped with a backslash (so a renderer shows it as it was typed), entity references
    and bare URLs defused, and control and invisible characters shown as escapes (`\\u202e`)."""
    parts = _LINE_BREAK.split(str(text)) if text else []
    line = printable(_INLINE.sub(r"\\\1", " ".join(part.strip() for part in parts if part.strip())))
    line = _ENTITY.sub(r"\\&", line)
    line = _AUTOLINK.sub("\\\\", line)
    match = _BLOCK_START.match(line)
    if match:
        start = match.end(1)
        if match.group(2)[0].isdigit():
            start = match.end(2)
        line = line[:start] + "\\" + line[start:]
    return line


SET_PROFILE_HINT = (
    "market-analyst profile set --user {user} "
    "--risk-tolerance conservative|moderate|aggressive --horizon short|medium|long"
)


def profile_statement(
    used: ProfileUsed, *, tense: str = "past", chosen: Mapping[str, Any] | None = None
) -> str:
    """The sentence that says which profile an analysis used (`tense="present"`: would use).

    `chosen` are the values picked for this thread (options, or first-run answers not saved): where
    there is no stored profile they replace the defaults, and the sentence says which is which."""
    p = used.profile
    if used.source == "stored":
        sectors = ", ".join(p.preferred_sectors) or "none"
        return (
            f"Profile of user {p.user_id!r} (updated {p.updated_at}): {p.risk_tolerance} risk tolerance, "
            f"{p.horizon} horizon, preferred sectors: {sectors}."
        )
    verb = "used" if tense == "past" else "runs use"
    picked = {k: v for k, v in (chosen or {}).items() if k in ("risk_tolerance", "horizon")}
    if picked:
        risk = picked.get("risk_tolerance", p.risk_tolerance)
        horizon = picked.get("horizon", p.horizon)

        def source(key: str) -> str:
            return "chosen for this thread" if key in picked else "the default"

        hint = SET_PROFILE_HINT.format(user=p.user_id)
        return (
            f"No stored profile for user {p.user_id!r}; {verb} {risk} risk tolerance "
            f"({source('risk_tolerance')}) and {horizon} horizon ({source('horizon')}). Set one with: {hint}"
        )
    return (
        f"No stored profile for user {p.user_id!r}; {verb} the defaults ({p.risk_tolerance} risk tolerance, "
        f"{p.horizon} horizon). Set one with: {SET_PROFILE_HINT.format(user=p.user_id)}"
    )


DISCLAIMER = "Educational software, not investment advice."


def _figures_table(d: dict[str, Any]) -> list[str]:
    f = d["figures"]
    lines = [
        "| figure | value |",
        "|---|---|",
        f"| last price ({d['as_of']}) | {price(f['price'])} |",
        f"| return 1M / 3M / 6M / 1Y | {signed_pct(f['return_1m'])} / {signed_pct(f['return_3m'])} / "
        f"{signed_pct(f['return_6m'])} / {signed_pct(f['return_1y'])} |",
        f"| annualised volatility (1Y) | {pct(f['volatility_1y'])} |",
        f"| maximum drawdown (1Y) | {pct(f['max_drawdown_1y'])} |",
        f"| SMA 50 / SMA 200 | {price(f['sma_50'])} / {price(f['sma_200'])} (trend: {f['trend']}) |",
        f"| RSI(14) | {one_decimal(f['rsi_14'])} |",
        f"| from 52-week high / low | {signed_pct(f['from_52w_high'])} / {signed_pct(f['from_52w_low'])} |",
    ]
    bench = f.get("benchmark")
    if bench:
        window = f"{bench['window_start']} to {bench['window_end']}"
        lines.append(f"| beta vs S&P 500 ({window}) | {two_decimals(bench['beta'])} |")
        lines.append(f"| return relative to S&P 500 (same window) | {signed_pct(bench['relative_return'])} |")
    else:
        lines.append(f"| beta vs S&P 500 | none: {f.get('benchmark_note') or 'no benchmark series'} |")
    return lines


def _feedback_section(d: dict[str, Any]) -> list[str]:
    """Each feedback item and what the analyst did with it: "addressed" only when it acted."""
    notes = d.get("feedback_notes") or [
        {"feedback": item, "response": "", "acted": False} for item in d["feedback"]
    ]
    if not notes:
        return []
    lines = ["", "## Reviewer feedback", ""]
    for note in notes:
        verdict = "addressed" if note["acted"] else "recorded, not acted on"
        answer = f": {plain(note['response'])}" if note["response"] else ""
        lines.append(f"- {plain(note['feedback'])} ({verdict}{answer})")
    return lines


MEMORY_KINDS_SHOWN = {
    "feedback": "revise feedback",
    "rejection": "rejection reason",
    "approval_note": "approval note",
    "report": "published report",
    "remembered": "asked to remember",
}


MEMORY_HEADING = "## What was said before"


def _memory_line(m: dict[str, Any]) -> str:
    kind = MEMORY_KINDS_SHOWN.get(str(m.get("kind")), plain(m.get("kind")))
    source = f"thread {plain(m['thread_id'])}" if m.get("thread_id") else "no thread"
    ticker = f", {plain(m['ticker'])}" if m.get("ticker") else ""
    who = f"{plain(m['said_by'])}: " if m.get("said_by") else ""  # drafts made before it was kept
    where = f"({source}, memory {plain(m['id'])})"
    return f"- {plain(m['date'])}, {who}{kind}{ticker} {where}: {plain(m['text'])}"


def _memories_section(d: dict[str, Any]) -> list[str]:
    """What was said before, as recall found it: each memory's day, who said it ("you", or a name and
    a role), its kind and source thread, and its text as literal data."""
    memories = d.get("memories") or []
    if not memories:
        return []
    lines = ["", MEMORY_HEADING]
    trail = [m for m in memories if m.get("why") == "ticker_trail"]
    similar = [m for m in memories if m.get("why") != "ticker_trail"]
    if trail:
        lines += ["", f"On {plain(d['ticker'])}, from your own threads, newest first:", ""]
        lines += [_memory_line(m) for m in trail]
        more = int(trail[0].get("trail_more") or 0)
        if more:
            lines.append(f"- and {more} earlier on {plain(d['ticker'])}, not shown")
    if similar:
        lines += ["", "Related, recalled by meaning:" if trail else "Recalled by meaning:", ""]
        lines += [_memory_line(m) for m in similar]
    if d.get("memory_response"):
        lines += ["", plain(d["memory_response"])]
    return lines


def render_markdown(d: dict[str, Any]) -> str:
    """The Markdown rendering of a draft (every figure it cites comes from `figures` or `facts`)."""
    lines = [
        f"# {plain(d['headline'])}",
        "",
        f"**Recommendation:** {plain(d['recommendation'].upper())}, confidence {d['confidence']:.2f}",
        "",
        f"**Question:** {plain(d['question'])}",
        "",
        plain(d["summary"]),
        "",
        "## Figures",
        "",
        *_figures_table(d),
        "",
        "## Risk factors",
        "",
    ]
    lines += [f"- {plain(r)}" for r in d["risk_factors"]] or ["- none flagged by the rules"]
    lines += [
        "",
        "## Basis",
        "",
        f"- Data: {plain(d['data_source'])}",
        f"- Profile: {plain(d['profile']['statement'])}",
    ]
    options = d.get("options") or {}
    if options:
        chosen = ", ".join(f"{k.replace('_', ' ')} {plain(v)}" for k, v in sorted(options.items()))
        stored = (d.get("profile") or {}).get("source") == "stored"
        lines.append(f"- Chosen for this thread{', not the stored profile' if stored else ''}: {chosen}")
    analyst = d["analyst"]
    lines.append(f"- Analyst: {plain(analyst['name'])} (version {plain(analyst['version'])})")
    lines.append(f"- Framing: {plain(d['framing'])}")
    lines += _feedback_section(d)
    lines += _memories_section(d)
    lines += ["", f"Draft {d['draft_id']}, revision {d['revision']}.", "", f"*{DISCLAIMER}*", ""]
    return "\n".join(lines)
