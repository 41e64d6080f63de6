"""Pure functions on the agent's conversation: its size as sent, and the hygiene that keeps it one a
strict chat-completions endpoint accepts. Every tool call keeps a unique ID, a valid name and
JSON-object arguments, and gets a reply; tool-call IDs that the server repeats or omits are replaced
by IDs of the application's own, unique in the conversation."""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from market_analyst.nodes.tools import TOOL_NAMES
from market_analyst.prompts import ANSWER_TOOL, NO_REPLY_RECORDED, unknown_tool, unreadable_arguments

# Bounds on the conversation: past MAX_PROMPT_CHARS the model may only answer; a turn adds at most
# MAX_CALLS_PER_TURN calls that run (arguments up to MAX_ARGUMENT_CHARS, results up to
# tools.MAX_RESULT_CHARS) and MAX_CONTENT_CHARS of the model's own text.
MAX_PROMPT_CHARS = 100_000
MAX_CALLS_PER_TURN = 4
MAX_ARGUMENT_CHARS = 6_000
MAX_ANSWER_ARGUMENT_CHARS = 60_000  # an answer is read up to here, so its refusal can say what is too long
MAX_CONTENT_CHARS = 2_000
MAX_KEPT_CALLS = 16  # calls past these in one message are dropped: never kept, never run, never answered
_CALL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # the function names chat-completions accepts


def prompt_chars(messages: list[Any]) -> int:
    """The size of a conversation as sent: every message's text and every tool call's arguments."""
    total = 0
    for message in messages:
        content = message.content
        total += len(content) if isinstance(content, str) else len(json.dumps(content))
        for call in getattr(message, "tool_calls", None) or []:
            total += len(call["name"]) + len(json.dumps(call.get("args") or {}))
    return total


def sendable(messages: list[Any]) -> list[Any]:
    """The conversation as it is sent: the same messages, with whatever a strict endpoint would refuse
    mended in the copy (a thread saved by an earlier version may hold such a state): every call has a
    unique ID, a valid name and JSON-object arguments, every call is followed by a reply (a missing one
    says so), and no reply answers nothing. The state is left as it was."""
    sent: list[Any] = []
    used: set[str] = set()
    waiting: dict[str, list[str]] = {}  # the last assistant message's calls without a reply yet

    def close_calls() -> None:
        for new_ids in waiting.values():
            sent.extend(ToolMessage(NO_REPLY_RECORDED, tool_call_id=i, status="error") for i in new_ids)
        waiting.clear()

    for message in messages:
        if isinstance(message, ToolMessage):
            queue = waiting.get(message.tool_call_id or "")
            if queue:
                sent.append(message.model_copy(update={"tool_call_id": queue.pop(0)}))
                if not queue:
                    del waiting[message.tool_call_id]
            continue  # a reply to no call of the message before it: not sent
        close_calls()
        if not isinstance(message, AIMessage) or not (message.tool_calls or message.invalid_tool_calls):
            sent.append(message)
            continue
        calls = []
        everything = [*message.tool_calls, *({**bad, "args": {}} for bad in message.invalid_tool_calls)]
        for index, call in enumerate(everything):
            stored_id = str(call.get("id") or "")
            new_id = _fresh_id(stored_id, used, 0, index)
            used.add(new_id)
            waiting.setdefault(stored_id, []).append(new_id)
            name = str(call.get("name") or "")
            args = call.get("args") if isinstance(call.get("args"), dict) else {}
            calls.append(
                {
                    "name": name if _CALL_NAME.match(name) else "not_a_tool",
                    "args": args,
                    "id": new_id,
                    "type": "tool_call",
                }
            )
        sent.append(message.model_copy(update={"tool_calls": calls, "invalid_tool_calls": []}))
    close_calls()
    return sent


def _fresh_id(wanted: str | None, used: set[str], step: int, index: int) -> str:
    """The server's tool-call ID when it is usable and unused, else one of the application's own."""
    if wanted and len(wanted) <= 64 and wanted.isascii() and wanted.isprintable() and wanted not in used:
        return wanted
    candidate, n = f"call_ma_{step}_{index}", 0
    while candidate in used:
        n += 1
        candidate = f"call_ma_{step}_{index}_{n}"
    return candidate


def tidy_reply(reply: Any, history: list[Any], step: int) -> tuple[AIMessage, dict[str, str]]:
    """The model's message as the conversation keeps it, and the calls that cannot run with why.

    Every call, well-formed or not, is kept as a call with a unique ID and JSON-object arguments, so
    each one can be answered and a strict endpoint accepts the conversation as sent next time."""
    used = {str(c["id"]) for m in history if isinstance(m, AIMessage) for c in m.tool_calls}
    calls: list[dict[str, Any]] = []
    problems: dict[str, str] = {}
    raw: list[tuple[dict[str, Any], str | None]] = [(dict(c), None) for c in reply.tool_calls]
    for bad in reply.invalid_tool_calls:
        text = (bad.get("args") or "").rstrip()
        what = "not a JSON object" if text.endswith("}") else "cut off before the JSON ended"
        raw.append(({"name": bad.get("name") or "", "args": {}, "id": bad.get("id")}, what))
    for index, (call, problem) in enumerate(raw[:MAX_KEPT_CALLS]):
        call_id = _fresh_id(call.get("id"), used, step, index)
        used.add(call_id)
        name = str(call.get("name") or "")
        args = call.get("args") if isinstance(call.get("args"), dict) else {}
        limit = MAX_ANSWER_ARGUMENT_CHARS if name == ANSWER_TOOL else MAX_ARGUMENT_CHARS
        if problem is None and len(json.dumps(args)) > limit:
            problem = f"over {limit} characters"
        if problem is not None:
            problems[call_id] = unreadable_arguments(problem)
            args = {}
        elif name not in TOOL_NAMES and name != ANSWER_TOOL:
            problems[call_id] = unknown_tool(name, TOOL_NAMES)
        kept_name = name if _CALL_NAME.match(name) else "not_a_tool"
        calls.append({"name": kept_name, "args": args, "id": call_id, "type": "tool_call"})
    content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
    tidy = AIMessage(
        content=content[:MAX_CONTENT_CHARS],
        tool_calls=calls,
        response_metadata=dict(getattr(reply, "response_metadata", {}) or {}),
    )
    return tidy, problems


def without_arguments(reply: AIMessage, call_ids: set[str]) -> AIMessage:
    """`reply` with the arguments of these calls emptied (still a JSON object, as a strict endpoint
    requires)."""
    calls = [{**c, "args": {}} if c["id"] in call_ids else c for c in reply.tool_calls]
    return reply.model_copy(update={"tool_calls": calls})
