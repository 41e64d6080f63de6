"""Revise: reviewer feedback (and the options the built-in analyst can act on) go back to the
analyst, which analyses again; the new draft stops at the gate again, and the command says what
changed against the draft before it."""

from __future__ import annotations

import difflib
from typing import Any

from market_analyst.choices import Horizon, RiskTolerance
from market_analyst.decisions import Identity
from market_analyst.deps import check_analyst
from market_analyst.errors import UserError
from market_analyst.rendering import render_markdown
from market_analyst.settings import Settings
from market_analyst.state import MAX_QUESTION_CHARS, validate_thread_id
from market_analyst.workflow.runs import Announce, Progress, Remembering, decide
from market_analyst.workflow.stores import chosen_user
from market_analyst.workflow.views import ThreadView

MAX_FEEDBACK_CHARS = 2000


def _analysis_lines(draft: dict[str, Any]) -> list[str]:
    """The draft's text without what changes on every revision whatever the analyst did: the
    reviewer feedback section, and the line naming the draft and its revision."""
    return render_markdown(
        {**draft, "feedback": [], "feedback_notes": [], "draft_id": "", "revision": 0}
    ).splitlines()


def draft_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What changed in the analysis from one draft to the next: the judgement, the risks, and the text
    line by line (not the feedback section, which a revise always changes)."""
    old_lines, new_lines = _analysis_lines(before), _analysis_lines(after)
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


def revise_thread(
    settings: Settings,
    thread_id: str,
    *,
    feedback: str | None = None,
    question: str | None = None,
    risk_tolerance: RiskTolerance | None = None,
    horizon: Horizon | None = None,
    user: str | None = None,
    identity: Identity | None = None,
    draft_id: str | None = None,
    content_hash: str | None = None,
    progress: Progress | None = None,
    announce: Announce | None = None,
    memories: Remembering = "now",
) -> ThreadView:
    """Send the feedback and options through the gate (a revise decision, in the name of `identity`,
    or of `user` unverified) and analyse again from `analyze`; the new draft waits at the gate."""
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
    if question and len(question) > MAX_QUESTION_CHARS:
        raise UserError(f"--question is {len(question)} characters; at most {MAX_QUESTION_CHARS}")
    check_analyst(settings)
    before, after = decide(
        settings,
        thread_id,
        action="revise",
        identity=identity or Identity(chosen_user(settings, user), verified=False, door="cli"),
        note=feedback or "",
        draft_id=draft_id,
        content_hash=content_hash,
        options=options | ({"question": question} if question else {}),
        progress=progress,
        announce=announce,
        memories=memories,
    )
    assert before.draft is not None and after.draft is not None
    after.extra = {
        "revision": after.draft["revision"],
        "feedback": feedback,
        "options": options | ({"question": question} if question else {}),
        "changes": draft_changes(before.draft, after.draft),
    }
    return after
