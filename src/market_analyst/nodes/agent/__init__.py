"""The LLM analyst's agent loop: one model turn at a time, and where the loop goes next.

A turn sends the conversation so far to the model, which either calls data tools (the graph then
runs them in `tools` and comes back) or submits its analysis. The model is not trusted:

- **A budget that holds.** A run has `max_steps` model turns; only the turns before the last may run
  tools, and the last (or any turn once the conversation passes `MAX_PROMPT_CHARS`) may only submit.
  A tool call made when no tool may run gets a reply saying so and is never run; a last turn without
  an accepted answer stops the command (the thread stays in progress, and `resume` asks for one more
  answer-only turn, from the same conversation).
- **Every tool call gets a reply.** A call whose arguments are not JSON (or are cut off), a name that
  is not a tool (whatever its case), a second answer, or a call past the per-turn limit is answered by
  a tool message that says what was wrong, and its arguments are kept as a valid JSON object, so the
  conversation stays one a strict endpoint accepts. Tool-call IDs that the server repeats or omits are
  replaced by IDs of the application's own, unique in the conversation.
- **Grounded answers only.** A submission is accepted only if its prose fits the limits, claims no
  approval, publication or compliance status, and cites only numbers the facts or tool *results*
  contain (see `analyst/grounding.py`); otherwise the model is told why and asked again.
- **Texts are data.** The question, the feedback, the previous draft and the notes recalled from
  earlier runs reach the model inside delimited blocks, each as one JSON string with control
  characters and line breaks escaped. A number in a recalled note (or a `recall` tool result) may be
  cited; nothing in one is followed.

The modules: `turn` (the turn and the route after it), `conversation` (pure functions on the
messages: their size, and the hygiene above), `judge` (the facts an answer may cite, and whether it
is taken); every text the model reads is in `market_analyst.prompts`.
"""

from market_analyst.nodes.agent.conversation import MAX_PROMPT_CHARS, prompt_chars, sendable, tidy_reply
from market_analyst.nodes.agent.judge import feedback_notes, memory_facts, recalled_facts, tool_facts
from market_analyst.nodes.agent.turn import agent_turn, next_step

__all__ = [
    "MAX_PROMPT_CHARS",
    "agent_turn",
    "feedback_notes",
    "memory_facts",
    "next_step",
    "prompt_chars",
    "recalled_facts",
    "sendable",
    "tidy_reply",
    "tool_facts",
]
