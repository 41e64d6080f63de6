"""draft_report: turn the analysis into the draft a person approves, with a content-derived ID."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from market_analyst.formatting import pct, signed_pct
from market_analyst.state import AnalystState, Draft, ProfileUsed


def draft_id_for(content: dict[str, Any]) -> str:
    """A digest of the draft's content and inputs: equal drafts share an ID, any change makes a new one."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def profile_statement(used: ProfileUsed) -> str:
    """The sentence that says which profile the analysis used."""
    p = used.profile
    if used.source == "stored":
        sectors = ", ".join(p.preferred_sectors) or "none"
        return (
            f"Profile of user {p.user_id!r} (updated {p.updated_at}): {p.risk_tolerance} risk tolerance, "
            f"{p.horizon} horizon, preferred sectors: {sectors}."
        )
    return (
        f"No stored profile for user {p.user_id!r}; used the defaults ({p.risk_tolerance} risk tolerance, "
        f"{p.horizon} horizon). Set one with: market-analyst profile set --user {p.user_id} "
        "--risk-tolerance conservative|moderate|aggressive --horizon short|medium|long"
    )


def render_markdown(d: dict[str, Any]) -> str:
    """The Markdown rendering of a draft (every figure it cites comes from `figures`)."""
    f = d["figures"]
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
        "| figure | value |",
        "|---|---|",
        f"| last price ({d['as_of']}) | {f['price']} |",
        f"| return 1M / 3M / 6M / 1Y | {signed_pct(f['return_1m'])} / {signed_pct(f['return_3m'])} / "
        f"{signed_pct(f['return_6m'])} / {signed_pct(f['return_1y'])} |",
        f"| annualised volatility (1Y) | {pct(f['volatility_1y'])} |",
        f"| maximum drawdown (1Y) | {pct(f['max_drawdown_1y'])} |",
        f"| SMA 50 / SMA 200 | {f['sma_50']} / {f['sma_200']} (trend: {f['trend']}) |",
        f"| RSI(14) | {f['rsi_14']} |",
        f"| from 52-week high / low | {signed_pct(f['from_52w_high'])} / {signed_pct(f['from_52w_low'])} |",
    ]
    bench = f.get("benchmark")
    if bench:
        lines.append(
            f"| beta vs S&P 500 ({bench['window_start']} to {bench['window_end']}) | {bench['beta']} |"
        )
        lines.append(f"| return relative to S&P 500 (same window) | {signed_pct(bench['relative_return'])} |")
    else:
        lines.append("| beta vs S&P 500 | n/a: no overlapping dates in the data |")
    lines += ["", "## Risk factors", ""]
    lines += [f"- {r}" for r in d["risk_factors"]] or ["- none flagged by the rules"]
    lines += ["", "## Basis", "", f"- Data: {d['data_source']}", f"- Profile: {d['profile']['statement']}"]
    analyst = d["analyst"]
    lines.append(f"- Analyst: {analyst['name']} (version {analyst['version']})")
    lines.append(f"- Framing: {d['framing']}")
    if d["feedback"]:
        lines += ["", "## Reviewer feedback addressed", ""]
        lines += [f"- {item}" for item in d["feedback"]]
    lines += ["", f"Draft {d['draft_id']}, revision {d['revision']}.", ""]
    return "\n".join(lines)


def draft_report(state: AnalystState) -> dict[str, Any]:
    """Assemble the draft. No clock is read here: the same inputs give the same draft, byte for byte."""
    market, analysis = state["market"], state["analysis"]
    figures = market["figures"]
    used = ProfileUsed.model_validate(state["profile"])
    previous = state.get("draft") or {}
    recommendation = analysis["recommendation"]
    one_year = figures.get("return_1y")
    headline = (
        f"{state['ticker']}: {recommendation.upper()} at {figures['price']} "
        f"(1Y {signed_pct(one_year)}, volatility {pct(figures['volatility_1y'])}), {market['data_source']}"
    )
    # The rules analyst leaves the prose to this node; the LLM analyst writes its own summary.
    summary = analysis.get("summary") or (
        f"{state['ticker']} closed at {figures['price']} on {market['as_of']}. "
        f"Over one year it returned {signed_pct(one_year)} with annualised volatility of "
        f"{pct(figures['volatility_1y'])} and a largest fall of "
        f"{pct(figures['max_drawdown_1y'])}; "
        f"the trend is {figures['trend']}. {analysis['framing']}"
    )
    content: dict[str, Any] = {
        "revision": int(previous.get("revision", 0)) + 1,
        "ticker": state["ticker"],
        "question": state.get("question") or f"Should I buy, hold or sell {state['ticker']}?",
        "headline": headline,
        "recommendation": recommendation,
        "confidence": analysis["confidence"],
        "score": analysis["score"],
        "summary": summary,
        "framing": analysis["framing"],
        "risk_factors": list(analysis["risk_factors"]),
        "figures": figures,
        "data_source": market["data_source"],
        "as_of": market["as_of"],
        "analyst": analysis["analyst"],
        "profile": {**used.model_dump(mode="json"), "statement": profile_statement(used)},
        "feedback": list(state.get("feedback") or []),
    }
    content["draft_id"] = draft_id_for({**content, "user_id": state.get("user_id")})
    content["markdown"] = render_markdown(content)
    draft = Draft.model_validate(content)
    # A new draft voids any earlier decision: an approval names the draft it approved.
    return {"draft": draft.model_dump(mode="json"), "approval": None}
