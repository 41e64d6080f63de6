"""The report archive in PostgreSQL (`MA_RECORDS=postgres`): the same documents and the same
exactly-once rules as the directory archive, shared by every host that reaches the database.

Each document is a JSONB row under its key, with its operation ID unique too: two hosts publishing
the same operation get one row and the second finds it; other content under the same key or
operation is refused, never overwritten. A document is stored only if it reads back as the very
bytes the directory archive would write (`render_document`), so `reports show` and a copy made by
`records migrate` can be checked byte for byte. Listing and search read indexed columns (newest
first, by ticker, by user) and a `tsvector` with a GIN index for text. Every operation opens its own
connection, so no process holds the database between requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from market_analyst.errors import ServiceUnavailable
from market_analyst.persistence.archive.directory import ArchiveError, ReportArchive, valid_key
from market_analyst.persistence.archive.document import build_document, parse_document, render_document
from market_analyst.persistence.archive.index import search_text
from market_analyst.persistence.records import records_connection
from market_analyst.ports import Listing, PublishRequest, PublishResult, ReportSummary
from market_analyst.redaction import redact_url
from market_analyst.settings import Settings

COMPONENT = "archive"
# Version N is MIGRATIONS[N-1], one statement each; a released migration is never edited, a change is
# a new one.
MIGRATIONS: tuple[str, ...] = (
    """CREATE TABLE ma_archive_reports (
        key text COLLATE "C" PRIMARY KEY,
        operation_id text COLLATE "C" UNIQUE,
        ticker text COLLATE "C" NOT NULL,
        user_id text COLLATE "C",
        created_at text COLLATE "C" NOT NULL,
        approved_by text NOT NULL,
        recommendation text NOT NULL,
        as_of text NOT NULL,
        headline text NOT NULL,
        search_text text NOT NULL,
        search tsvector GENERATED ALWAYS AS (to_tsvector('simple', search_text)) STORED,
        document jsonb NOT NULL,
        stored_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX ma_archive_reports_newest ON ma_archive_reports (created_at DESC, key DESC)",
    "CREATE INDEX ma_archive_reports_ticker ON ma_archive_reports (ticker, created_at DESC, key DESC)",
    "CREATE INDEX ma_archive_reports_user ON ma_archive_reports (user_id, created_at DESC, key DESC)",
    "CREATE INDEX ma_archive_reports_search ON ma_archive_reports USING gin (search)",
)

_SUMMARY = "key, ticker, user_id, created_at, approved_by, recommendation, as_of, headline"
_INSERT_COLUMNS = (
    "key, operation_id, ticker, user_id, created_at, approved_by, recommendation, as_of, headline, "
    "search_text, document"
)
# Rows a migration sends in one transaction: few enough that a killed copy loses little work.
COPY_BATCH = 500


def _row(key: str, document: dict[str, Any]) -> tuple[Any, ...]:
    report = document.get("report") or {}
    operation_id = document.get("operation_id")
    return (
        key,
        None if operation_id is None else str(operation_id),
        str(document.get("ticker", "")),
        None if document.get("user_id") is None else str(document["user_id"]),
        str(document.get("created_at", "")),
        str(document.get("approved_by", "")),
        str(report.get("recommendation", "")),
        str(document.get("as_of", "")),
        str(report.get("headline", "")),
        search_text(key, document),
    )


def _text_query(text: str) -> tuple[str, list[Any]]:
    """The text filter: the GIN index finds the reports holding every word of `text` in order, then
    the case-blind substring check keeps exactly those the directory archive would find."""
    needle = text.casefold()
    if any(ch.isalnum() for ch in needle):
        return "search @@ phraseto_tsquery('simple', %s) AND strpos(search_text, %s) > 0", [needle, needle]
    return "strpos(search_text, %s) > 0", [needle]  # punctuation alone: no words to index


@dataclass
class CopyCounts:
    """What a copy into PostgreSQL did: documents copied, found already there (identical), found there
    with other content (left alone), and source documents that could not be read."""

    copied: int = 0
    present: int = 0
    conflicts: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


class PostgresArchive:
    """The archive's documents in the records database; see the module docstring."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def location(self) -> str:
        """The records database, without its password."""
        if self.settings.postgres_url:
            return f"the PostgreSQL archive at {redact_url(self.settings.postgres_url)}"
        return f"the PostgreSQL archive in the embedded server at {self.settings.postgres_dir}"

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        try:
            with records_connection(self.settings, COMPONENT, MIGRATIONS) as conn:
                yield conn
        except psycopg.OperationalError as exc:  # the server went away mid-operation
            raise ServiceUnavailable(
                f"{self.location} stopped answering ({str(exc).strip().splitlines()[0]}); "
                "run the command again"
            ) from None

    def check(self) -> str:
        """ "ok" once a connection is open and the archive's tables are current."""
        with self._connect():
            return "ok"

    # -- writing ----------------------------------------------------------------------------------

    def publish_report(self, request: PublishRequest) -> PublishResult:
        """Publish the document of an approved draft under its operation's key (`ports.ArchiveWriter`)."""
        document = build_document(request)
        return self.publish(document["key"], document)

    def publish(self, key: str, document: dict[str, Any]) -> PublishResult:
        """Store `document` under `key` once; a repeat of the same document returns the stored one.

        `INSERT ... ON CONFLICT DO NOTHING` on the key and the operation ID: of two writers at once,
        one inserts and the other waits for its commit and then finds the row."""
        valid_key(key)
        payload = render_document(document)
        with self._connect() as conn:
            inserted = self._insert(conn, key, document, payload)
            if inserted:
                return PublishResult(key, document, True)
            existing = self._get(conn, key)
            if existing is None:
                other = self._key_of_operation(conn, document.get("operation_id"))
                raise ArchiveError(
                    f"operation {document.get('operation_id')} was already published under archive key "
                    f"{other}; refusing to publish it again under {key}"
                )
        if render_document(existing) != payload:
            if existing.get("operation_id") != document.get("operation_id"):
                raise ArchiveError(f"archive key {key} already holds another operation's report")
            raise ArchiveError(
                f"operation {document.get('operation_id')} was already published with different content "
                f"({self.location}, key {key}); refusing to overwrite it"
            )
        return PublishResult(key, existing, False)

    def _insert(self, conn: Any, key: str, document: dict[str, Any], payload: bytes) -> bool:
        """Insert the row unless the key or operation is taken; True if this call inserted it. A
        document that would not read back as `payload` (JSONB drops what JSON cannot say exactly) is
        refused and nothing is written."""
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(
                    f"INSERT INTO ma_archive_reports ({_INSERT_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING document",
                    (*_row(key, document), Jsonb(document)),
                )
                row = cur.fetchone()
                if row is None:
                    return False
                if render_document(row["document"]) != payload:
                    raise ArchiveError(
                        f"report {key} cannot be stored in PostgreSQL exactly as written (JSONB would "
                        "change it); nothing was stored"
                    )
                return True
        except psycopg.DataError as exc:
            raise ArchiveError(
                f"PostgreSQL refused report {key}: {str(exc).strip().splitlines()[0]}"
            ) from None

    def remove(self, key: str) -> bool:
        """Delete the document under `key`; False when there was none."""
        valid_key(key)
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM ma_archive_reports WHERE key = %s RETURNING key", (key,))
            return cur.fetchone() is not None

    # -- reading ----------------------------------------------------------------------------------

    @staticmethod
    def _get(conn: Any, key: str) -> dict[str, Any] | None:
        with conn.cursor() as cur:
            cur.execute("SELECT document FROM ma_archive_reports WHERE key = %s", (key,))
            row = cur.fetchone()
        return None if row is None else dict(row["document"])

    @staticmethod
    def _key_of_operation(conn: Any, operation_id: Any) -> str | None:
        with conn.cursor() as cur:
            cur.execute("SELECT key FROM ma_archive_reports WHERE operation_id = %s", (str(operation_id),))
            row = cur.fetchone()
        return None if row is None else str(row["key"])

    def get(self, key: str) -> dict[str, Any] | None:
        """The document stored under `key`, None if there is none."""
        valid_key(key)
        with self._connect() as conn:
            return self._get(conn, key)

    def keys(self) -> list[str]:
        """Keys of every document, sorted."""
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT key FROM ma_archive_reports ORDER BY key")
            return [row["key"] for row in cur.fetchall()]

    def search(
        self,
        *,
        ticker: str | None = None,
        user_id: str | None = None,
        text: str | None = None,
        limit: int = 1_000_000,
    ) -> Listing:
        """The newest `limit` reports matching every filter given (ticker and user exactly, text as a
        case-blind substring of the report, found through the full-text index), and how many more
        matched. The filters mean what they mean on the directory archive."""
        where: list[str] = []
        args: list[Any] = []
        if ticker:
            where.append("ticker = %s")
            args.append(ticker.upper())
        if user_id:
            where.append("user_id = %s")
            args.append(user_id)
        if text:
            clause, values = _text_query(text)
            where.append(clause)
            args.extend(values)
        condition = (" WHERE " + " AND ".join(where)) if where else ""
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT {_SUMMARY} FROM ma_archive_reports{condition} "
                "ORDER BY created_at DESC, key DESC LIMIT %s",
                [*args, limit],
            )
            reports = [ReportSummary(**row) for row in cur.fetchall()]
            more = 0
            if len(reports) == limit:  # only a full page can have more behind it
                cur.execute(f"SELECT count(*) AS n FROM ma_archive_reports{condition}", args)
                row = cur.fetchone()
                more = max(0, int(row["n"]) - len(reports)) if row else 0
        return Listing(reports, [], more)

    def list(self) -> Listing:
        """Every report, newest first."""
        return self.search()

    # -- copying a directory archive in -----------------------------------------------------------

    def copy_from(
        self,
        source: ReportArchive,
        *,
        batch: int = COPY_BATCH,
        progress: Callable[[CopyCounts], None] | None = None,
    ) -> CopyCounts:
        """Copy every document of the directory archive `source` here, reading the source only.

        Each batch is one transaction: inserted where neither key nor operation is taken, then every
        document of the batch (new or already there) is read back and compared byte for byte with its
        source file. One already there with other content is a conflict and is left alone; one that
        would not read back exactly rolls its batch back. A copy killed part-way loses at most the
        batch in flight, and running it again finds the rest already present."""
        counts = CopyCounts()
        keys = _source_keys(source)
        with self._connect() as conn:
            for start in range(0, len(keys), batch):
                chunk = [_read_source(source, key, counts) for key in keys[start : start + batch]]
                self._copy_batch(conn, [item for item in chunk if item is not None], counts)
                if progress is not None:
                    progress(counts)
        return counts

    def _copy_batch(
        self, conn: Any, items: Sequence[tuple[str, dict[str, Any], bytes]], counts: CopyCounts
    ) -> None:
        if not items:
            return
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO ma_archive_reports ({_INSERT_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING key",
                    [(*_row(key, document), Jsonb(document)) for key, document, _ in items],
                    returning=True,
                )
                inserted = set()
                while True:
                    row = cur.fetchone()
                    if row is not None:
                        inserted.add(row["key"])
                    if not cur.nextset():
                        break
                cur.execute(
                    "SELECT key, document FROM ma_archive_reports WHERE key = ANY(%s)",
                    ([key for key, _, _ in items],),
                )
                stored = {row["key"]: row["document"] for row in cur.fetchall()}
                for key, _, payload in items:
                    here = stored.get(key)
                    same = here is not None and render_document(here) == payload
                    if key in inserted and not same:
                        raise ArchiveError(
                            f"report {key} cannot be stored in PostgreSQL exactly as written (JSONB would "
                            "change it); this batch was rolled back and the source is unchanged"
                        )
                    if key in inserted:
                        counts.copied += 1
                    elif same:
                        counts.present += 1
                    else:
                        counts.conflicts.append(key)
        except psycopg.DataError as exc:
            raise ArchiveError(
                f"PostgreSQL refused a report from the archive: {str(exc).strip().splitlines()[0]}"
            ) from None


def _source_keys(source: ReportArchive) -> list[str]:
    """The document names in the source directory, without opening or indexing anything there."""
    if source.root.exists() and not source.root.is_dir():
        raise ArchiveError(
            f"MA_ARCHIVE_DIR {source.root} is a file, not a directory: point it at a directory"
        )
    return source.keys()


def _read_source(
    source: ReportArchive, key: str, counts: CopyCounts
) -> tuple[str, dict[str, Any], bytes] | None:
    """A source document and its exact bytes, or None (with a line in `counts.unreadable`)."""
    try:
        path: Path = source.path_for(key)
        data = path.read_bytes()
        document = parse_document(data)
    except ArchiveError as exc:
        counts.unreadable.append(str(exc))
        return None
    except OSError as exc:
        counts.unreadable.append(f"cannot read {source.root / (key + '.json')}: {exc.strerror}")
        return None
    except ValueError as exc:
        counts.unreadable.append(f"{source.root / (key + '.json')} is not a valid report: {exc}")
        return None
    if render_document(document) != data:
        counts.unreadable.append(
            f"{source.root / (key + '.json')} is not in the form the archive writes (edited by hand?)"
        )
        return None
    return key, document, data
