"""recall: what the owner said before about this ticker and question, fetched before the analysis.

Memories are written by the workflow (decisions, published reports, `remember`) and read here only:
they reach the draft's "What was said before" and the analyst as data. Nothing in one can change a
rule of the application: the gate and the decision rule never read them.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from market_analyst.context import Deps
from market_analyst.state import DEFAULT_USER, AnalystState

# At most this many memories, and this many characters of their text, go into a run.
RECALL_LIMIT = 5
RECALL_BUDGET_CHARS = 1500


def recall_query(ticker: str | None, question: str | None) -> str:
    """What the memories are searched with: the question asked, alone. The run's ticker is not a word
    of the query (report memories all carry the symbol, so they came first without answering): it is
    passed apart, and favours memories about it in the ranking (`TICKER_BOOST`). Without a question,
    the ticker is all there is to search with, and the relevance floor does not apply (`recall`).

    `make eval-memory` asks its labelled questions through this function, so its figures are the
    recall `analyze` gets."""
    asked = (question or "").strip()
    return asked or (ticker or "")


def recall(state: AnalystState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Keep the owner's memories relevant to this run in the state. An owner without memories costs the
    store's cheap check only: no model is loaded."""
    owner = state.get("user_id") or DEFAULT_USER
    # No `has_memories` first: `recall` makes the same check before it loads anything (the port's
    # promise), and a second look would cost a user who has memories one more open of the store.
    question = (state.get("question") or "").strip()
    found = runtime.context.memory.recall(
        owner,
        recall_query(state["ticker"], question),
        ticker=state["ticker"],
        limit=RECALL_LIMIT,
        budget_chars=RECALL_BUDGET_CHARS,
        now=runtime.context.now(),
        floor=bool(question),  # without a question, what was said about the ticker at all
    )
    return {"recalled": [m.model_dump(mode="json") for m in found if m.owner == owner and not m.superseded]}
