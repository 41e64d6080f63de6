"""Display text shared by the draft and the terminal: the report's Markdown and the profile sentence."""

from __future__ import annotations

from typing import Any

from market_analyst.formatting import one_decimal, pct, price, signed_pct, two_decimals
from market_analyst.state import ProfileUsed

SET_PROFILE_HINT = (
    "market-analyst profile set --user {user} "
    "--risk-tolerance conservative|moderate|aggressive --horizon short|medium|long"
)


def profile_statement(used: ProfileUsed, *, tense: str = "past") -> str:
    """The sentence that says which profile an analysis used (`tense="present"`: would use)."""
    p = used.profile
    if used.source == "stored":
        sectors = ", ".join(p.preferred_sectors) or "none"
        return (
            f"Profile of user {p.user_id!r} (updated {p.updated_at}): {p.risk_tolerance} risk tolerance, "
            f"{p.horizon} horizon, preferred sectors: {sectors}."
        )
    verb = "used" if tense == "past" else "runs use"
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
        lines.append(f"- {note['feedback']} ({verdict}{': ' + note['response'] if note['response'] else ''})")
    return lines


def render_markdown(d: dict[str, Any]) -> str:
    """The Markdown rendering of a draft (every figure it cites comes from `figures` or `facts`)."""
    lines = [
        f"# {d['headline']}",
        "",
        f"**Recommendation:** {d['recommendation'].upper()}, confidence {d['confidence']:.2f}",
        "",
        f"**Question:** {d['question']}",
        "",
        d["summary"],
        "",
        "## Figures",
        "",
        *_figures_table(d),
        "",
        "## Risk factors",
        "",
    ]
    lines += [f"- {r}" for r in d["risk_factors"]] or ["- none flagged by the rules"]
    lines += ["", "## Basis", "", f"- Data: {d['data_source']}", f"- Profile: {d['profile']['statement']}"]
    options = d.get("options") or {}
    if options:
        chosen = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(options.items()))
        lines.append(f"- Chosen for this thread with revise (not the stored profile): {chosen}")
    analyst = d["analyst"]
    lines.append(f"- Analyst: {analyst['name']} (version {analyst['version']})")
    lines.append(f"- Framing: {d['framing']}")
    lines += _feedback_section(d)
    lines += ["", f"Draft {d['draft_id']}, revision {d['revision']}.", "", f"*{DISCLAIMER}*", ""]
    return "\n".join(lines)
