"""The factory of the real adapters: `build_deps(settings)` gives the nodes their `Deps`, the
commands that read or manage a store get it here, and `open_checkpointer` opens the checkpointer.
Nothing is opened until it is used.

This is the one door to the adapters (`persistence`), and the only reader of `Settings` among them:
it turns the settings into the URLs, paths and servers each adapter takes. The import contract in
`pyproject.toml` (`make lint`) lets no other module above them import one.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from market_analyst.context import Deps
from market_analyst.decisions import DecisionPolicy, DecisionSeal, seal_key
from market_analyst.errors import UserError
from market_analyst.persistence.approvers.files import ApproverStore
from market_analyst.persistence.archive.files import ReportArchive
from market_analyst.persistence.audit.files import AuditLog
from market_analyst.persistence.memory.edge import EdgeMemoryStore
from market_analyst.persistence.memory.server import QdrantMemoryStore
from market_analyst.persistence.postgres.embedded import embedded_server
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.persistence.profiles.store import Migration, ProfileStore
from market_analyst.persistence.sessions.files import SessionStore, SignInLimits
from market_analyst.ports import (
    Analyst,
    Approver,
    Approvers,
    AuditRecords,
    ChatModel,
    CheckpointBackend,
    Embedder,
    MarketDataProvider,
    ReportStore,
    ReportSummary,
    SessionRecord,
    Sessions,
    SignInFailures,
)
from market_analyst.settings import Settings

if TYPE_CHECKING:
    from market_analyst.deadlines import Deadlines
    from market_analyst.persistence.archive.postgres import CopyCounts as ArchiveCopy
    from market_analyst.persistence.keys.base import Keyring, KeyStore
    from market_analyst.persistence.migrate import AuditCopy, KeyCopy
    from market_analyst.persistence.notifications.delivery import Queue
    from market_analyst.persistence.notifications.store import NotificationStore

__all__ = [
    "Approver",
    "ApproverStore",
    "Approvers",
    "AuditLog",
    "AuditRecords",
    "Migration",
    "ReportSummary",
    "SessionRecord",
    "SessionStore",
    "Sessions",
    "SignInFailures",
    "SignInLimits",
    "build_deps",
    "check_analyst",
    "copy_approvers_to_records",
    "copy_archive_to_records",
    "copy_audit_to_records",
    "copy_keys_to_records",
    "made_before",
    "records_copy_marks",
    "decision_policy",
    "decision_seal",
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
    "postgres_server",
    "records_location",
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


def open_archive(settings: Settings) -> ReportStore:
    """The report archive: in the records database with `MA_RECORDS=postgres`, else the directory
    `MA_ARCHIVE_DIR` (default: `reports/` in the data directory). Opens nothing until it is used."""
    if settings.records == "postgres":
        from market_analyst.persistence.archive.postgres import PostgresArchive

        return PostgresArchive(postgres_server(settings))
    return ReportArchive(settings.archive_dir)


def copy_archive_to_records(
    settings: Settings,
    progress: Callable[[ArchiveCopy], None] | None = None,
    erased: Callable[[Any], bool] | None = None,
) -> tuple[ArchiveCopy, str, str]:
    """Copy the directory archive (`MA_ARCHIVE_DIR`) into the records database, whatever
    `MA_RECORDS` says, reading the directory only: the counts, and where from and to. A report that
    `erased` says was erased there since the last copy is not copied back."""
    from market_analyst.persistence.archive.postgres import PostgresArchive
    from market_analyst.persistence.migrate import copy_archive, made_before

    source, target = ReportArchive(settings.archive_dir), PostgresArchive(postgres_server(settings))
    counts = copy_archive(source, target, progress=progress, erased=erased or made_before(None))
    return counts, source.location, target.location


def made_before(since: Any) -> Callable[[Any], bool]:
    """Whether a record made at a given time (ISO text) is older than `since` (see
    `persistence.migrate.made_before`)."""
    from market_analyst.persistence.migrate import made_before as older_than

    return older_than(since)


def records_copy_marks(settings: Settings) -> Any:
    """When each data directory's last complete copy into the records database started
    (`persistence.migrate.CopyMarks`)."""
    from market_analyst.persistence.migrate import CopyMarks

    return CopyMarks(postgres_server(settings))


def copy_approvers_to_records(
    settings: Settings, erased: Callable[[Any], bool] | None = None
) -> tuple[int, int]:
    """Copy the data directory's approvers (names, roles, token hashes) and session secret into the
    records database, whatever `MA_RECORDS` says, reading the files only: (copied, already present).
    An approver that `erased` says was removed there since the last copy stays removed."""
    from market_analyst.persistence.approvers.postgres import PostgresApproverStore
    from market_analyst.persistence.migrate import copy_approvers, made_before

    target = PostgresApproverStore(postgres_server(settings))
    return copy_approvers(ApproverStore(settings.data_dir), target, erased or made_before(None))


def copy_audit_to_records(settings: Settings) -> AuditCopy:
    """Copy the data directory's audit log into the records database (entries in order, the chain
    verified before and after), whatever `MA_RECORDS` says, reading the files only."""
    from market_analyst.persistence.audit.postgres import PostgresAuditLog
    from market_analyst.persistence.migrate import copy_audit

    return copy_audit(AuditLog(settings.data_dir / "audit"), PostgresAuditLog(postgres_server(settings)))


def copy_keys_to_records(
    settings: Settings, erased: Callable[[Any], bool] | None = None
) -> tuple[KeyCopy, str, str]:
    """Copy the threads' data keys from the data directory into the records database, each wrapped by
    the master key the database's hosts use (`MA_MASTER_KEY`, which a database on a server needs;
    else the data directory's `master.key`), reading the files only: the counts, and where from and
    to. A key the directory's master key wrapped is unwrapped and wrapped again by that one."""
    from dataclasses import replace

    from market_analyst.persistence.keys.base import (
        MAKE_ONE,
        MASTER_FILE,
        MasterKey,
        WrappedKey,
        load_master_key,
    )
    from market_analyst.persistence.keys.files import FileKeyStore
    from market_analyst.persistence.keys.postgres import PostgresKeyStore
    from market_analyst.persistence.migrate import copy_keys, made_before

    source, target = FileKeyStore(settings.data_dir / "keys"), PostgresKeyStore(postgres_server(settings))
    configured = settings.secret("master_key")
    masters: dict[str, MasterKey] = {}

    def target_master() -> MasterKey:
        if "target" not in masters:  # asked for only when a key is copied
            if settings.postgres_url and not configured:
                raise UserError(
                    f"the threads' data keys go to {target.location}, which every host shares, so they "
                    "are wrapped by the master key all of them will use: set MA_MASTER_KEY for the copy "
                    f"(and on every host after the switch); {MAKE_ONE}"
                )
            masters["target"] = load_master_key(configured, settings.data_dir)
        return masters["target"]

    def rewrap(key: WrappedKey) -> WrappedKey:
        wanted = target_master()
        if key.master == wanted.fingerprint:
            return key
        held = [load_master_key(configured, settings.data_dir)] if configured else []
        if (settings.data_dir / MASTER_FILE).exists():
            held.append(load_master_key(None, settings.data_dir))
        for master in held:
            if master.fingerprint == key.master:
                data_key = master.unwrap(key, source.location)
                return replace(key, master=wanted.fingerprint, wrapped=wanted.wrap(key.key_id, data_key))
        raise UserError(
            f"the data key of thread {key.thread_id} in {source.location} was wrapped by a master key "
            f"(fingerprint {key.master}) that neither MA_MASTER_KEY nor {settings.data_dir / MASTER_FILE} "
            "is; set the MA_MASTER_KEY that wrapped it and run the copy again"
        )

    return copy_keys(source, target, rewrap, erased or made_before(None)), source.location, target.location


def postgres_server(settings: Settings) -> PostgresServer:
    """The PostgreSQL server of the checkpointer and the records database: `POSTGRES_URL`, or the
    embedded server in the data directory (started when first connected to)."""
    return PostgresServer(settings.postgres_url, settings.postgres_dir)


def records_location(settings: Settings) -> str:
    """Where the records database is, for messages, without its password (starts nothing)."""
    return postgres_server(settings).describe("records database")


def open_keys(settings: Settings) -> KeyStore:
    """Where the threads' wrapped data keys live: the records store (the data directory, or the records
    database when `MA_RECORDS=postgres`)."""
    if settings.records == "postgres":
        from market_analyst.persistence.keys.postgres import PostgresKeyStore

        return PostgresKeyStore(postgres_server(settings))
    from market_analyst.persistence.keys.files import FileKeyStore

    return FileKeyStore(settings.data_dir / "keys")


def open_keyring(settings: Settings) -> Keyring:
    """The data keys of the records store, unwrapped by the master key (`MA_MASTER_KEY`, or the data
    directory's `master.key`, made on first use, not before; a records database on a server, shared
    by every host, needs `MA_MASTER_KEY`)."""
    from market_analyst.persistence.keys.base import Keyring, load_master_key

    store = open_keys(settings)
    if settings.records == "postgres" and settings.postgres_url:  # shared: refused at once without one
        master = load_master_key(settings.secret("master_key"), settings.data_dir, shared_by=store.location)
        return Keyring(store, lambda: master, now=lambda: _key_made(settings))
    return Keyring(
        store,
        lambda: load_master_key(settings.secret("master_key"), settings.data_dir),
        now=lambda: _key_made(settings),
    )


def _key_made(settings: Settings) -> str:
    """When a data key is made, to the microsecond: `records migrate`, run again, tells a key made
    just before its last copy (and erased in the database since) from one made during it by that
    moment alone (`persistence.migrate.made_before`)."""
    return settings.now().isoformat(timespec="microseconds")


def compact_after_erasure(settings: Settings) -> list[str]:
    """After `forget` or `prune`: on the embedded server, rewrite the tables erased from and drop the
    WAL that held their old rows (see `persistence.postgres.compact`); nothing on other servers, or
    when neither the checkpointer nor the records live on it."""
    from market_analyst.persistence.postgres.compact import compact_erased

    if settings.checkpointer != "postgres" and settings.records != "postgres":
        return []
    return compact_erased(postgres_server(settings))


@contextmanager
def open_checkpointer(settings: Settings) -> Iterator[CheckpointBackend]:
    """Yield the ready backend that `settings.checkpointer` selects (PostgreSQL, embedded by default or
    `POSTGRES_URL`, or Redis at `REDIS_URL`): a saver with `setup()` done that seals every value under
    its thread's data key, the per-thread lease of the same backend, and the errors that mean its
    server went away. Closed afterwards."""
    keyring = open_keyring(settings)
    if settings.checkpointer == "postgres":
        from market_analyst.persistence.checkpoints.postgres import open_postgres

        server = postgres_server(settings)
        with open_postgres(server.uri(), embedded=server.embedded, keyring=keyring) as postgres:
            yield postgres
    else:
        from market_analyst.persistence.checkpoints.redis import open_redis

        with open_redis(
            settings.redis_url,
            shallow=settings.redis_shallow,
            lease_ttl_seconds=settings.lease_ttl_seconds,
            keyring=keyring,
        ) as redis:
            yield redis


@contextmanager
def open_run_stores(
    settings: Settings, progress: Callable[[str], None] | None = None
) -> Iterator[tuple[CheckpointBackend, Callable[[], Deps]]]:
    """What a run over the graph needs from the factory, asked for once: the open checkpointer, and
    what builds the nodes' dependencies when the run first needs them (a read never does)."""
    with open_checkpointer(settings) as backend:
        yield backend, lambda: build_deps(settings, progress)


def store_checks(settings: Settings) -> dict[str, Callable[[], str]]:
    """Each store's own check, by name, for `/healthz`: "ok", or it raises `UserError` or
    `ServiceUnavailable` saying what is wrong. Building them opens nothing; each opens its store alone."""

    def checkpointer() -> str:
        with open_checkpointer(settings):  # opened is answering: connected, and its tables set up
            return "ok"

    def profiles() -> str:
        open_profiles(settings).get("health-check")
        return "ok"

    def archive() -> str:
        return open_archive(settings).check()

    def records() -> str:  # the approvers, sessions and audit log, apart from the archive
        open_approvers(settings).list()
        return "ok"

    checks = {"checkpointer": checkpointer, "profiles": profiles, "archive": archive}
    if settings.records == "postgres":
        checks["records"] = records
    return checks


def stop_embedded_server(settings: Settings) -> bool:
    """Stop the embedded PostgreSQL of the data directory if one runs; True if one was stopped."""
    from market_analyst.persistence.postgres.embedded import stop_embedded_postgres

    return stop_embedded_postgres(settings.postgres_dir)


def open_approvers(settings: Settings) -> Approvers:
    """The web inbox's approvers and its session secret: in the data directory, or in the PostgreSQL
    records database with `MA_RECORDS=postgres`."""
    if settings.records == "postgres":
        from market_analyst.persistence.approvers.postgres import PostgresApproverStore

        return PostgresApproverStore(postgres_server(settings))
    return ApproverStore(settings.data_dir)


def open_sessions(settings: Settings) -> Sessions:
    """The web inbox's signed-in sessions, shared by every server process: in the data directory (one
    host), or in the records database with `MA_RECORDS=postgres` (every host)."""
    idle, lifetime = settings.session_idle.total_seconds(), settings.session_max.total_seconds()
    if settings.records == "postgres":
        from market_analyst.persistence.sessions.postgres import PostgresSessionStore

        return PostgresSessionStore(postgres_server(settings), idle=idle, lifetime=lifetime)
    return SessionStore(settings.data_dir, idle=idle, lifetime=lifetime)


def open_sign_in_limits(settings: Settings, *, limit: int, window: float) -> SignInFailures:
    """The failed sign-ins every server process counts against: in the data directory, or in the
    records database with `MA_RECORDS=postgres`."""
    if settings.records == "postgres":
        from market_analyst.persistence.sessions.postgres import PostgresSignInLimits

        return PostgresSignInLimits(postgres_server(settings), limit=limit, window=window)
    return SignInLimits(settings.data_dir, limit=limit, window=window)


def open_audit(settings: Settings) -> AuditRecords:
    """The audit log of decisions and publications: the data directory's `audit/`, or the records
    database with `MA_RECORDS=postgres`."""
    if settings.records == "postgres":
        from market_analyst.persistence.audit.postgres import PostgresAuditLog

        return PostgresAuditLog(postgres_server(settings))
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
        max_draft_age=settings.max_draft_age.total_seconds(),
        deadlines=deadlines(settings),
    )


def decision_seal(settings: Settings) -> DecisionSeal:
    """What seals the decisions the gate accepts: keyed by the records store's secret (the data
    directory's, or the records database's with `MA_RECORDS=postgres`), shared by every process and
    host that shares those records, and by no client."""
    store = open_approvers(settings)
    return DecisionSeal(lambda: seal_key(store.session_secret()))


def open_profiles(settings: Settings) -> ProfileStore:
    """The profile store: `QDRANT_URL` if set, else the embedded store in the data directory (Qdrant
    Edge, or local mode with `MA_PROFILE_STORE=local`). Opens nothing until it is used."""
    if settings.qdrant_url:
        api_key = settings.secret("qdrant_api_key")
        return ProfileStore(url=settings.qdrant_url, api_key=api_key, now=settings.now)
    return ProfileStore(path=settings.profiles_dir, engine=settings.profile_store, now=settings.now)


def open_embedder(settings: Settings) -> Callable[[], Embedder]:
    """What embeds memories (`MA_EMBEDDER`), built on first use: WordLlama's bundled model, or an
    OpenAI-compatible endpoint at the store's 256 dimensions."""
    from market_analyst.persistence.memory.embedder import (
        WORDLLAMA_DIMENSION,
        OpenAIEmbedder,
        WordLlamaEmbedder,
    )

    if settings.embedder == "wordllama":
        return WordLlamaEmbedder
    api_key = settings.secret("openai_api_key")
    if not api_key:
        raise UserError("MA_EMBEDDER=openai needs OPENAI_API_KEY (and OPENAI_BASE_URL for another server)")
    model, base_url, timeout = settings.openai_embedding_model, settings.openai_base_url, settings.llm_timeout
    return lambda: OpenAIEmbedder(
        model=model, dimension=WORDLLAMA_DIMENSION, api_key=api_key, base_url=base_url, timeout=timeout
    )


def open_memory(settings: Settings) -> EdgeMemoryStore | QdrantMemoryStore:
    """The memory store: the `memories` collection of the Qdrant server at `QDRANT_URL` if set, else
    the Qdrant Edge shard `memories/` in the data directory; embedded by `MA_EMBEDDER`. Opens nothing
    and loads no model until it is used."""
    embedder = open_embedder(settings)
    url = settings.qdrant_url
    if url:
        from market_analyst.persistence.qdrant.server import open_server_client

        api_key = settings.secret("qdrant_api_key")
        return QdrantMemoryStore(lambda: open_server_client(url, api_key), embedder=embedder, location=url)
    return EdgeMemoryStore(
        settings.data_dir / "memories", embedder=embedder, marker_key=memory_marker_key(settings)
    )


def memory_marker_key(settings: Settings) -> Callable[[], bytes]:
    """What names the memory store's owner markers: a key of the records secret (as the decision seal
    is), so that a marker's name says nothing to someone who guesses user IDs."""
    from market_analyst.persistence.memory.owners import marker_key

    store = open_approvers(settings)
    return lambda: marker_key(store.session_secret())


_event_stores: dict[tuple[str | None, str], NotificationStore] = {}
_events_lock = threading.Lock()


def open_events(settings: Settings) -> NotificationStore:
    """The event outbox and its deliveries, in the records database (`MA_RECORDS=postgres`) or, with
    the records in files, the data directory's embedded server (`POSTGRES_URL`'s when set), which
    the job queue needs."""
    from market_analyst.persistence.notifications.store import NotificationStore

    server = postgres_server(settings)
    place = (server.url, str(server.pgdata))
    with _events_lock:  # one a process and place, so its connection is kept between decisions
        store = _event_stores.get(place)
        if store is None:
            store = _event_stores[place] = NotificationStore(server)
    return store


def deadlines(settings: Settings) -> Deadlines:
    """The due times the settings give every decision request."""
    from market_analyst.deadlines import Deadlines

    return Deadlines(
        due=settings.decision_due,
        remind_every=settings.remind_every,
        max_reminders=settings.max_reminders,
        escalate_to=tuple(sorted(settings.escalate_to)),
        expire_after=settings.expire_after,
    )


def open_queue(settings: Settings, expire: Callable[[str, str], bool | None] | None = None) -> Queue:
    """The job queue that delivers events to the configured receivers (`MA_WEBHOOK_URL`) and keeps
    the due times; `expire(thread_id, draft_id)` records a draft's expiry (False: nothing there can
    expire any more)."""
    from market_analyst.persistence.notifications.delivery import Queue
    from market_analyst.persistence.notifications.routes import Routes

    routes = Routes(
        settings.public_url,
        open_approvers(settings),
        webhook_url=settings.webhook_url,
        webhook_secret=settings.secret("webhook_secret"),
        smtp_url=settings.smtp_url,
        mail_from=settings.mail_from,
    )
    return Queue(
        postgres_server(settings),
        open_events(settings),
        routes,
        attempts=settings.webhook_attempts,
        backoff=settings.webhook_backoff.total_seconds(),
        deadlines=deadlines(settings) if settings.keeps_deadlines else None,
        now=settings.now,
        expire=expire,
    )


def background_worker(queue: Queue) -> Any:
    """A worker of `queue` on a thread of its own, started (`stop()` ends it)."""
    from market_analyst.persistence.notifications.delivery import BackgroundWorker

    worker = BackgroundWorker(queue)
    worker.start()
    return worker


def build_deps(settings: Settings, notify: Callable[[str], None] | None = None) -> Deps:
    """The dependencies `settings` describe. Opens nothing until a node uses it; `notify` hears what a
    long step is waiting for (a model that does not answer at once)."""
    deps = Deps(
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
        seal=decision_seal(settings),
    )
    return dataclasses.replace(deps, events=open_events(settings)) if settings.notifies else deps
