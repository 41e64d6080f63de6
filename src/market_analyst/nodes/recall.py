"""recall: what the owner said before about this ticker and question, fetched before the analysis.

Memories are written by the workflow (decisions, published reports, `remember`) and read here only:
they reach the draft's "What was said before" and the analyst as data. Nothing in one can change a
rule of the application: the gate and the decision rule never read them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from langgraph.runtime import Runtime

from market_analyst.context import Deps
from market_analyst.ports import MemoryStore
from market_analyst.state import DEFAULT_USER, TRAIL_KINDS, AnalystState, Memory

# What goes into a run: the ticker's decision trail (at most TRAIL_LIMIT, newest first), and beside
# it at most RECALL_LIMIT memories, RECALL_BUDGET_CHARS characters of text, that recall by meaning
# finds. The trail takes nothing from recall by meaning, so `make eval-memory`'s figures for it stay
# what a run gets.
RECALL_LIMIT = 5
RECALL_BUDGET_CHARS = 1500
TRAIL_LIMIT = 3
# What the store is asked to keep to: no limit of its own, the budget is applied here.
UNBOUNDED_CHARS = 1_000_000


def recall_query(ticker: str | None, question: str | None) -> str:
    """What the memories are searched with: the question asked, alone. The run's ticker is not a word
    of the query (report memories all carry the symbol, so they came first without answering): it is
    passed apart, and favours memories about it in the ranking (`TICKER_BOOST`). Without a question,
    the ticker is all there is to search with, and the relevance floor does not apply (`recall`).

    `make eval-memory` asks its labelled questions through this function, so its figures are the
    recall `analyze` gets."""
    asked = (question or "").strip()
    return asked or (ticker or "")


def gather(
    memory: MemoryStore, owner: str, ticker: str, question: str | None, now: datetime
) -> tuple[list[Memory], int, list[Memory]]:
    """What a run on `ticker` for `owner` hears (see `recall`): the trail (newest first, at most
    TRAIL_LIMIT), how many older trail memories are neither in it nor among the similar ones, and
    the similar ones (at most RECALL_LIMIT, RECALL_BUDGET_CHARS of text, none from the trail).
    `make eval-memory` asks through this too."""
    trail, more = memory.trail(owner, ticker, limit=TRAIL_LIMIT)
    trail = [m for m in trail if m.owner == owner and not m.superseded]
    asked = (question or "").strip()
    # No `has_memories` first: `recall` makes the same check before it loads anything (the port's
    # promise), and a second look would cost a user who has memories one more open of the store.
    found = memory.recall(  # asked for the trail's too, which are then left out
        owner,
        recall_query(ticker, asked),
        ticker=ticker,
        limit=RECALL_LIMIT + len(trail),
        budget_chars=UNBOUNDED_CHARS,
        now=now,
        floor=bool(asked),  # without a question, what was said about the ticker at all
    )
    shown = {m.id for m in trail}
    similar: list[Memory] = []
    used = 0
    for m in found:
        if m.owner != owner or m.superseded or m.id in shown or len(similar) >= RECALL_LIMIT:
            continue
        if used + len(m.text) <= RECALL_BUDGET_CHARS:  # as the store's budget does: skip what does not fit
            similar.append(m)
            used += len(m.text)
    # An older trail memory that recall by meaning found is shown there: not counted as left out.
    older = sum(1 for m in similar if m.ticker == ticker and m.kind in TRAIL_KINDS and m.thread_id)
    return trail, max(0, more - older), similar


def recall(state: AnalystState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Keep the owner's memories for this run in the state, each saying why it is there (`why`):

    - `ticker_trail`: the decision trail of the owner's own threads on this ticker (what reviewers
      asked, why a draft was rejected, what the last approver said, the last report), newest first,
      whatever the question: a second look at a ticker always hears it. Each of them carries
      `trail_more`, how many older ones the cap left out (and recall by meaning did not bring).
    - `similar`: what recall by meaning and words finds for the question, with the relevance floor,
      none of them already in the trail.

    An owner without memories costs the store's cheap check only: no model is loaded."""
    owner = state.get("user_id") or DEFAULT_USER
    trail, more, similar = gather(
        runtime.context.memory, owner, state["ticker"], state.get("question"), runtime.context.now()
    )
    return {
        "recalled": [
            *({**m.model_dump(mode="json"), "why": "ticker_trail", "trail_more": more} for m in trail),
            *({**m.model_dump(mode="json"), "why": "similar"} for m in similar),
        ]
    }
