"""The closed sets of values settings, options and profiles take. Imports nothing heavy, so the CLI
can type its options with them (Typer then checks each choice) without loading pydantic for `--help`."""

from typing import Literal

Durability = Literal["sync", "async", "exit"]
CheckpointerKind = Literal["postgres", "redis"]
MarketDataKind = Literal["snapshot", "csv", "yfinance"]
AnalystKind = Literal["auto", "rules", "llm"]
ProfileStoreKind = Literal["edge", "local"]
# Where approvers, sessions, the session secret, the audit log and the archive live.
RecordsKind = Literal["files", "postgres"]
# What turns a memory into a dense vector: the bundled WordLlama model, or an OpenAI-compatible endpoint.
EmbedderKind = Literal["wordllama", "openai"]
MemoryKind = Literal["feedback", "rejection", "approval_note", "report", "remembered"]
RecallMode = Literal["bm25", "dense", "hybrid", "hybrid_recency"]
RiskTolerance = Literal["conservative", "moderate", "aggressive"]
Horizon = Literal["short", "medium", "long"]
ThreadStatus = Literal[
    "awaiting_approval",  # paused at the gate with a draft and no decision
    "expired",  # paused at the gate with a draft past MA_EXPIRE_AFTER: a revise drafts it again
    "approved_pending_publish",  # an approval is recorded; publish has not finished
    "published",
    "rejected",
    "in_progress",  # stopped before the gate (a crash, an outage): `resume` continues it
    "ended",  # finished without a publication or a rejection
]
# Who an approver is: what each may decide is the gate's rule (`decisions.ROLE_ACTIONS`).
Role = Literal["requester", "reviewer", "approver", "operator"]
ROLES: tuple[str, ...] = ("requester", "reviewer", "approver", "operator")
