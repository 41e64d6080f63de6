"""Judging the model's answer: the facts it may cite (the figures, the recalled notes, the results of
the data tools that ran), whether it fits the schema, claims no status and cites only grounded
numbers (`analyst/grounding.py`), and what it did about each reviewer feedback item."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from pydantic import ValidationError

from market_analyst.analyst.grounding import Facts, status_claims, tool_fact
from market_analyst.analyst.llm import LLMAnalysis
from market_analyst.nodes.tools import RECALL_TOOL, TOOL_NAMES
from market_analyst.prompts import schema_misfit, status_claimed, ungrounded_citations
from market_analyst.state import AnalystState


def memory_facts(state: AnalystState) -> list[str]:
    """The recalled memories' texts as facts: a number the answer takes from one of them is grounded
    (their text only: the digits of an ID, a thread or a date ground nothing)."""
    return [f"memory: {m.get('text')}" for m in state.get("recalled") or []]


def tool_facts(messages: list[Any]) -> list[str]:
    """Each tool *result* in the conversation as a fact line: only the replies of data tools that ran
    (never an error, a refusal or the application's own notes)."""
    calls = {c["id"]: c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    facts = []
    for message in messages:
        if not isinstance(message, ToolMessage) or message.status != "success":
            continue
        call = calls.get(message.tool_call_id or "")
        if call is not None and call["name"] in TOOL_NAMES and isinstance(message.content, str):
            if call["name"] == RECALL_TOOL:
                facts += recalled_facts(message.content)
            else:
                facts.append(tool_fact(call["name"], call.get("args") or {}, message.content))
    return facts


def recalled_facts(result: str) -> list[str]:
    """The texts of the notes a `recall` call returned, each as a fact line like the memories given
    at the start (their numbers are in their text, which a JSON result's figures would not read)."""
    try:
        notes = json.loads(result).get("notes") or []
    except (ValueError, AttributeError):
        return []
    return [f"memory: {n.get('text')}" for n in notes if isinstance(n, dict)]


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def _prose(answer_or_draft: Any) -> tuple[str, list[str]]:
    if isinstance(answer_or_draft, LLMAnalysis):
        return answer_or_draft.summary, list(answer_or_draft.risk_factors)
    return str(answer_or_draft.get("summary") or ""), [
        str(r) for r in answer_or_draft.get("risk_factors") or []
    ]


def feedback_notes(
    feedback: list[str], answer: LLMAnalysis, previous: dict[str, Any]
) -> list[dict[str, Any]]:
    """What the analyst did about each feedback item, matched by the item's text (never by position),
    with `acted` kept only when the analysis's prose differs from the previous revision's."""
    by_text = {_normal(r.feedback): r for r in answer.feedback_responses}
    unchanged = bool(previous) and _prose(answer) == _prose(previous)
    notes = []
    for item in feedback:
        response = by_text.get(_normal(item))
        if response is None:
            notes.append(
                {"feedback": item, "response": "the analyst did not answer this item", "acted": False}
            )
        elif response.acted and unchanged:
            notes.append(
                {
                    "feedback": item,
                    "response": (
                        f"the analyst said it acted ({response.change}), but the summary and risk factors "
                        f"are the same as in revision {previous.get('revision')}"
                    ),
                    "acted": False,
                }
            )
        else:
            notes.append({"feedback": item, "response": response.change, "acted": response.acted})
    return notes


def judge(arguments: dict[str, Any], facts: Facts) -> tuple[LLMAnalysis | None, str]:
    """The answer if it fits the schema and its limits, claims no status and cites only grounded
    numbers, else why not."""
    try:
        answer = LLMAnalysis.model_validate(arguments)
    except ValidationError as exc:
        errors = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'answer'}: {error['msg']}"
            for error in exc.errors()[:6]
        )
        return None, schema_misfit(errors)
    problems = []
    claims = [c for text in answer.texts() for c in status_claims(text)]
    if claims:
        problems.append(status_claimed(claims))
    unsupported = [n for text in answer.texts() for n in facts.ungrounded(text)]
    if unsupported:
        problems.append(ungrounded_citations(unsupported))
    if problems:
        return None, "; ".join(problems)
    return answer, ""
