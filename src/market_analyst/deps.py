"""The factory of the real adapters: `build_deps(settings)` gives the nodes their `Deps`, the
commands that read or manage a store get it here, and `open_checkpointer` opens the checkpointer.
Nothing is opened until it is used.

This is the one door to the adapters (`persistence`, `services`): the import contract in
`pyproject.toml` (`make lint`) lets no other module above them import one.
"""

from __future__ import annotations

from collections.abc import Callable

from market_analyst.decisions import DecisionPolicy
from market_analyst.errors import UserError
from market_analyst.persistence.approvals.approvers import Approver, ApproverStore
from market_analyst.persistence.approvals.audit import AuditLog
from market_analyst.persistence.approvals.sessions import SessionRecord, SessionStore
from market_analyst.persistence.approvals.sign_in_limits import SignInLimits
from market_analyst.persistence.archive.directory import ReportArchive
from market_analyst.persistence.archive.index import ReportSummary
from market_analyst.persistence.checkpoints.factory import (
    embedded_server,
    open_checkpointer,
    stop_embedded_server,
)
from market_analyst.persistence.memory.edge import EdgeMemoryStore
from market_analyst.persistence.memory.qdrant import QdrantMemoryStore
from market_analyst.persistence.profiles.store import Migration, ProfileStore
from market_analyst.ports import Analyst, ChatModel, Deps, MarketDataProvider
from market_analyst.settings import Settings

__all__ = [
    "Approver",
    "ApproverStore",
    "AuditLog",
    "Migration",
    "ReportSummary",
    "SessionRecord",
    "SessionStore",
    "SignInLimits",
    "build_deps",
    "check_analyst",
    "decision_policy",
    "embedded_server",
    "open_analyst",
    "open_approvers",
    "open_archive",
    "open_audit",
    "open_checkpointer",
    "open_market_data",
    "open_memory",
    "open_model",
    "open_profiles",
    "open_sessions",
    "open_sign_in_limits",
    "stop_embedded_server",
]


def check_analyst(settings: Settings) -> None:
    """Refuse settings that choose the LLM analyst without a key, before a run starts."""
    if settings.uses_llm and settings.openai_api_key is None:
        raise UserError("MA_ANALYST=llm needs OPENAI_API_KEY (and OPENAI_BASE_URL for another server)")


def open_analyst(settings: Settings) -> Analyst:
    """The built-in rules: the whole analysis, or the baseline the LLM analyst is given."""
    from market_analyst.analyst.rules import RulesAnalyst

    return RulesAnalyst()


def open_model(settings: Settings, notify: Callable[[str], None] | None = None) -> ChatModel | None:
    """The chat model when the settings choose the LLM analyst (or `OPENAI_API_KEY` is set), else None.

    Opens nothing: commands that only read a thread never touch the model, so they do not need its
    key; the commands that run it check first (`check_analyst`)."""
    if not settings.uses_llm:
        return None
    from market_analyst.analyst.llm import LLMAnalyst

    return LLMAnalyst(
        model=settings.openai_model,
        api_key=settings.secret("openai_api_key") or "",
        base_url=settings.openai_base_url,
        timeout=settings.llm_timeout,
        attempts=settings.llm_attempts,
        notify=notify,
    )


def open_market_data(settings: Settings) -> MarketDataProvider:
    """The provider `settings.market_data` selects."""
    if settings.market_data == "snapshot":
        from market_analyst.market_data.snapshot import SnapshotProvider

        return SnapshotProvider()
    if settings.market_data == "csv":
        from market_analyst.market_data.csv import CsvDirectoryProvider

        if settings.csv_dir is None:
            raise UserError("--data csv needs MA_CSV_DIR: a directory of TICKER.csv files")
        return CsvDirectoryProvider(settings.csv_dir)
    from market_analyst.market_data.yfinance import YFinanceProvider

    return YFinanceProvider()


def open_archive(settings: Settings) -> ReportArchive:
    """The report archive in `MA_ARCHIVE_DIR` (default: `reports/` in the data directory)."""
    return ReportArchive(settings.archive_dir)


def open_approvers(settings: Settings) -> ApproverStore:
    """The web inbox's approvers and its session secret, in the data directory."""
    return ApproverStore(settings.data_dir)


def open_sessions(settings: Settings) -> SessionStore:
    """The web inbox's signed-in sessions, in the data directory (shared by every server process)."""
    return SessionStore(
        settings.data_dir,
        idle=settings.session_idle.total_seconds(),
        lifetime=settings.session_max.total_seconds(),
    )


def open_sign_in_limits(settings: Settings, *, limit: int, window: float) -> SignInLimits:
    """The failed sign-ins every server process counts against, in the data directory."""
    return SignInLimits(settings.data_dir, limit=limit, window=window)


def open_audit(settings: Settings) -> AuditLog:
    """The audit log of decisions and publications, in the data directory's `audit/`."""
    return AuditLog(settings.data_dir / "audit")


def decision_policy(settings: Settings) -> DecisionPolicy:
    """Who may decide and how many approve, from the settings and the approvers' roles (read when a
    decision is checked, so a role changed in another process counts at once)."""
    store = open_approvers(settings)
    return DecisionPolicy(
        required_approvals=settings.required_approvals,
        allowed=settings.approvers,
        allow_self_approval=settings.allow_self_approval,
        role_of=store.role_of,
    )


def open_profiles(settings: Settings) -> ProfileStore:
    """The profile store: `QDRANT_URL` if set, else the embedded store in the data directory (Qdrant
    Edge, or local mode with `MA_PROFILE_STORE=local`). Opens nothing until it is used."""
    return ProfileStore.from_settings(settings)


def open_memory(settings: Settings) -> EdgeMemoryStore | QdrantMemoryStore:
    """The memory store: the `memories` collection of the Qdrant server at `QDRANT_URL` if set, else
    the Qdrant Edge shard `memories/` in the data directory; embedded with WordLlama's bundled
    model. Opens nothing and loads no model until it is used."""
    from market_analyst.persistence.memory.embedder import WordLlamaEmbedder

    url = settings.qdrant_url
    if url:
        from market_analyst.persistence.profiles.qdrant import open_server_client

        api_key = settings.secret("qdrant_api_key")
        return QdrantMemoryStore(
            lambda: open_server_client(url, api_key), embedder=WordLlamaEmbedder, location=url
        )
    return EdgeMemoryStore(settings.data_dir / "memories", embedder=WordLlamaEmbedder)


def build_deps(settings: Settings, notify: Callable[[str], None] | None = None) -> Deps:
    """The dependencies `settings` describe. Opens nothing until a node uses it; `notify` hears what a
    long step is waiting for (a model that does not answer at once)."""
    return Deps(
        market_data=open_market_data(settings),
        profiles=open_profiles(settings),
        archive=open_archive(settings),
        analyst=open_analyst(settings),
        model=open_model(settings, notify),
        max_steps=settings.llm_max_steps,
        now=settings.now,
        policy=decision_policy(settings),
        audit=open_audit(settings),
        memory=open_memory(settings),
    )
