"""draft_report: turn the analysis into the draft a person approves, with a content-derived ID."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from market_analyst.context import Deps
from market_analyst.deadlines import iso, schedule
from market_analyst.decisions import content_hash
from market_analyst.formatting import pct, price, signed_pct, who_said
from market_analyst.ports import Event, event_id_for
from market_analyst.rendering import profile_statement, render_markdown
from market_analyst.state import AnalystState, Draft, ProfileUsed


def draft_id_for(content: dict[str, Any]) -> str:
    """A digest of the draft's content and inputs: equal drafts share an ID, any change makes a new one."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def memory_line(memory: dict[str, Any]) -> dict[str, Any]:
    """What the draft shows of a recalled memory: when (UTC day), what kind, who said it (`who_said`),
    from which thread, its text as it was stored, and why it is there (`ticker_trail`, with how many
    older ones the trail's cap left out, or `similar`; a run before the trail recalled by meaning only)."""
    at = datetime.fromisoformat(str(memory["created_at"]).replace("Z", "+00:00"))
    day = (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC).date().isoformat()
    line = {
        "id": memory["id"],
        "date": day,
        "kind": memory["kind"],
        "said_by": who_said(str(memory["kind"]), memory.get("said_by"), memory.get("owner")),
        "thread_id": memory.get("thread_id"),
        "ticker": memory.get("ticker"),
        "text": memory["text"],
        "why": "ticker_trail" if memory.get("why") == "ticker_trail" else "similar",
    }
    if line["why"] == "ticker_trail":
        line["trail_more"] = int(memory.get("trail_more") or 0)
    return line


def draft_report(state: AnalystState, config: RunnableConfig, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Assemble the draft. The draft holds no time: the same inputs give the same draft, byte for byte;
    when it was made is kept beside it (`drafted_at`), for its age."""
    market, analysis = state["market"], state.get("analysis")
    assert analysis is not None, "draft_report runs only after an analysis"
    figures = market["figures"]
    used = ProfileUsed.model_validate(state["profile"])
    previous = state.get("draft") or {}
    recommendation = analysis["recommendation"]
    one_year = figures.get("return_1y")
    headline = (
        f"{state['ticker']}: {recommendation.upper()} at {price(figures['price'])} "
        f"(1Y {signed_pct(one_year)}, volatility {pct(figures['volatility_1y'])}), {market['data_source']}"
    )
    # The rules analyst leaves the prose to this node; the LLM analyst writes its own summary.
    summary = analysis.get("summary") or (
        f"{state['ticker']} closed at {price(figures['price'])} on {market['as_of']}. "
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
        "profile": {
            **used.model_dump(mode="json"),
            "statement": profile_statement(used, chosen=state.get("overrides")),
        },
        "options": dict(state.get("overrides") or {}),
        "feedback": list(state.get("feedback") or []),
        "feedback_notes": list(analysis.get("feedback_notes") or []),
        "facts": list(analysis.get("facts") or []),
        "memories": [memory_line(m) for m in state.get("recalled") or []],
        "memory_response": str(analysis.get("memory_response") or "") if state.get("recalled") else "",
        # What the price chart is drawn from, kept with the draft so the archive shows the chart
        # that was approved (None for a run that fetched its data before charts existed).
        "chart": market.get("chart"),
    }
    content["draft_id"] = draft_id_for({**content, "user_id": state.get("user_id")})
    content["markdown"] = render_markdown(content)
    draft = Draft.model_validate(content)
    # A new draft voids any earlier decision: an approval names the draft it approved.
    drafted_at = runtime.context.now().isoformat(timespec="seconds")
    thread_id = str(config["configurable"]["thread_id"])
    times = schedule(datetime.fromisoformat(drafted_at), runtime.context.policy.deadlines)
    # Written before the checkpoint that holds the draft: a re-run after a crash names the same event.
    runtime.context.events.put(
        Event(
            event_id=event_id_for("requested", thread_id, draft.draft_id),
            kind="requested",
            at=drafted_at,
            thread_id=thread_id,
            ticker=draft.ticker,
            draft_id=draft.draft_id,
            content_hash=content_hash(draft.markdown),
            revision=draft.revision,
            by=state.get("user_id"),
            requester=state.get("user_id"),
            due_at=iso(times.due_at),
            expires_at=iso(times.expires_at),
        )
    )
    return {
        "draft": draft.model_dump(mode="json"),
        "drafted_at": drafted_at,
        "expired": None,
        "approval": None,
        "approvals": [],
        "decision": None,
    }
