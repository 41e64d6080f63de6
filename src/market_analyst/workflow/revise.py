"""Revise: reviewer feedback (and the options the built-in analyst can act on) go back to the
analyst, which analyses again; the new draft stops at the gate again, and the command says what
changed against the draft before it."""

from __future__ import annotations

import difflib
from typing import Any

from langchain_core.messages import RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from market_analyst.choices import Horizon, RiskTolerance
from market_analyst.deps import build_deps, check_analyst
from market_analyst.errors import UserError
from market_analyst.settings import Settings
from market_analyst.state import validate_thread_id
from market_analyst.workflow.runs import Progress, advance, open_run
from market_analyst.workflow.upgrade import upgrade_updates
from market_analyst.workflow.views import ThreadView, config_for, decidable_view, read_state

MAX_FEEDBACK_CHARS = 2000


def draft_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What changed from one draft to the next: the judgement, the risks, and the text line by line."""
    old_lines, new_lines = before["markdown"].splitlines(), after["markdown"].splitlines()
    diff = list(difflib.ndiff(old_lines, new_lines))
    old_risks, new_risks = before["risk_factors"], after["risk_factors"]
    return {
        "recommendation": [before["recommendation"], after["recommendation"]],
        "confidence": [before["confidence"], after["confidence"]],
        "risk_factors_added": [r for r in new_risks if r not in old_risks],
        "risk_factors_removed": [r for r in old_risks if r not in new_risks],
        "lines_added": sum(1 for line in diff if line.startswith("+ ")),
        "lines_removed": sum(1 for line in diff if line.startswith("- ")),
    }


def _updates(
    values: dict[str, Any], feedback: str | None, question: str | None, options: dict[str, str]
) -> dict:
    updates: dict[str, Any] = {
        # A new analysis: the last one's judgement and the model's conversation are set aside.
        "analysis": None,
        "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
        "agent_steps": 0,
    }
    if feedback:
        updates["feedback"] = [*list(values.get("feedback") or []), feedback]
    if question:
        updates["question"] = question
    if options:
        updates["overrides"] = {**dict(values.get("overrides") or {}), **options}
    return updates


def revise_thread(
    settings: Settings,
    thread_id: str,
    *,
    feedback: str | None = None,
    question: str | None = None,
    risk_tolerance: RiskTolerance | None = None,
    horizon: Horizon | None = None,
    progress: Progress | None = None,
) -> ThreadView:
    """Record the feedback and options and analyse again from `analyze`; the new draft waits at the gate."""
    validate_thread_id(thread_id)
    feedback = (feedback or "").strip() or None
    question = (question or "").strip() or None
    options = {k: str(v) for k, v in {"risk_tolerance": risk_tolerance, "horizon": horizon}.items() if v}
    if not (feedback or question or options):
        raise UserError(
            "revise needs --feedback 'what the next draft should change', or one of --question, "
            "--risk-tolerance, --horizon"
        )
    if feedback and len(feedback) > MAX_FEEDBACK_CHARS:
        raise UserError(f"--feedback is {len(feedback)} characters; at most {MAX_FEEDBACK_CHARS}")
    check_analyst(settings)
    with open_run(settings, thread_id, build_deps(settings, progress)) as run:
        before = decidable_view(run.graph, thread_id, "revise")
        values = read_state(run.graph, config_for(thread_id)).values
        # Written as if fetch_market_data had just finished, so the analyst runs again, then the draft.
        updates = {**upgrade_updates(run, thread_id), **_updates(values, feedback, question, options)}
        run.graph.update_state(config_for(thread_id), updates, as_node="fetch_market_data")
        after = advance(run, None, thread_id, progress)
    assert before.draft is not None and after.draft is not None
    after.extra = {
        "revision": after.draft["revision"],
        "feedback": feedback,
        "options": options | ({"question": question} if question else {}),
        "changes": draft_changes(before.draft, after.draft),
    }
    return after
