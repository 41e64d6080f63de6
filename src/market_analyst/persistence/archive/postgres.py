"""The report archive in PostgreSQL (`MA_RECORDS=postgres`): the same documents and the same
exactly-once rules as the directory archive, shared by every host that reaches the database.

Each document is one row under its key, with its operation ID unique too: two hosts publishing the
same operation get one row and the second finds it; other content under the same key or operation is
refused, never overwritten. The row keeps the document's exact bytes (`body`, what the directory
archive writes to its file, Markdown rendering included) and the JSONB document derived from them, so
`reports show` is unchanged and a copy made by `records migrate` (`persistence/migrate.py`) is
checked byte for byte (by SHA-256 in the server, without sending the documents back). Listing and
search read indexed columns (newest first, by ticker, by user) and a `tsvector` with a GIN index for
text. Every operation opens its own connection, so no process holds the database between requests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from market_analyst.errors import ServiceUnavailable
from market_analyst.persistence.archive.base import Archive, ArchiveError, Query, settle_repeat, valid_key
from market_analyst.persistence.archive.document import render_document
from market_analyst.persistence.archive.index import search_text
from market_analyst.persistence.postgres.records import records_connection
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.ports import Listing, PublishResult, ReportSummary

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
        body text NOT NULL,
        document jsonb GENERATED ALWAYS AS (body::jsonb) STORED,
        stored_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX ma_archive_reports_newest ON ma_archive_reports (created_at DESC, key DESC)",
    "CREATE INDEX ma_archive_reports_ticker ON ma_archive_reports (ticker, created_at DESC, key DESC)",
    "CREATE INDEX ma_archive_reports_user ON ma_archive_reports (user_id, created_at DESC, key DESC)",
    "CREATE INDEX ma_archive_reports_search ON ma_archive_reports USING gin (search)",
    # Kept uncompressed: compressing two copies of every report made a copy into the archive take
    # half as long again (measured on 3,000 reports); listings read neither column.
    "ALTER TABLE ma_archive_reports ALTER COLUMN body SET STORAGE EXTERNAL, "
    "ALTER COLUMN document SET STORAGE EXTERNAL",
)

_SUMMARY = "key, ticker, user_id, created_at, approved_by, recommendation, as_of, headline"
_INSERT_COLUMNS = (
    "key, operation_id, ticker, user_id, created_at, approved_by, recommendation, as_of, headline, "
    "search_text, body"
)
_VALUES = "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
_DIGESTS = (
    "SELECT key, sha256(convert_to(body, 'UTF8')) AS digest FROM ma_archive_reports WHERE key = ANY(%s)"
)
# A document on its way in from another archive: its key, the document and its exact bytes.
StoredDocument = tuple[str, dict[str, Any], bytes]


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
    erased: int = 0  # missing here, made before the last copy: erased here since, not copied back


class PostgresArchive(Archive):
    """The archive's documents in the records database on `server`; see the module docstring."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server

    @property
    def location(self) -> str:
        """The records database, without its password."""
        return self.server.describe("archive")

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        try:
            with records_connection(self.server, COMPONENT, MIGRATIONS) as conn:
                yield conn
        except psycopg.OperationalError as exc:  # the server went away mid-operation
            raise ServiceUnavailable(
                f"{self.location} stopped answering ({_first_line(exc)}); run the command again"
            ) from None

    def check(self) -> str:
        """ "ok" once a connection is open and the archive's tables are current."""
        with self._connect():
            return "ok"

    # -- writing ----------------------------------------------------------------------------------

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
        return settle_repeat(key, document, payload, existing, f"{self.location}, key {key}")

    def _insert(self, conn: Any, key: str, document: dict[str, Any], payload: bytes) -> bool:
        """Insert the row unless the key or operation is taken; True if this call inserted it."""
        try:
            with conn.cursor() as cur:
                cur.execute(
                    f"INSERT INTO ma_archive_reports ({_INSERT_COLUMNS}) {_VALUES} "
                    "ON CONFLICT DO NOTHING RETURNING key",
                    (*_row(key, document), payload.decode()),
                )
                return cur.fetchone() is not None
        except psycopg.DataError as exc:  # JSONB holds no NaN and no \u0000: say so, store nothing
            raise ArchiveError(f"PostgreSQL refused report {key}: {_first_line(exc)}") from None

    def redact(
        self, key: str, change: Callable[[dict[str, Any]], dict[str, Any]], record: Callable[[str, str], None]
    ) -> tuple[str, str] | None:
        valid_key(key)
        with self._connect() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT body FROM ma_archive_reports WHERE key = %s FOR UPDATE", (key,))
            row = cur.fetchone()
            if row is None:
                return None
            body = str(row["body"])
            document = change(dict(json.loads(body)))
            payload = render_document(document)
            if payload.decode() == body:
                return None
            hashes = hashlib.sha256(body.encode()).hexdigest(), hashlib.sha256(payload).hexdigest()
            record(*hashes)
            _, _, *columns = _row(key, document)
            cur.execute(
                "UPDATE ma_archive_reports SET (ticker, user_id, created_at, approved_by, recommendation, "
                "as_of, headline, search_text, body) = (%s, %s, %s, %s, %s, %s, %s, %s, %s) WHERE key = %s",
                (*columns, payload.decode(), key),
            )
        return hashes

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
            cur.execute("SELECT body FROM ma_archive_reports WHERE key = %s", (key,))
            row = cur.fetchone()
        return None if row is None else dict(json.loads(row["body"]))

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

    def _search(self, query: Query) -> Listing:
        """The reports `query` asks for, through the indexed columns and the full-text index."""
        where: list[str] = []
        args: list[Any] = []
        if query.ticker:
            where.append("ticker = %s")
            args.append(query.ticker.upper())
        if query.user_id:
            where.append("user_id = %s")
            args.append(query.user_id)
        if query.text:
            clause, values = _text_query(query.text)
            where.append(clause)
            args.extend(values)
        condition = (" WHERE " + " AND ".join(where)) if where else ""
        with self._connect() as conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT {_SUMMARY} FROM ma_archive_reports{condition} "
                "ORDER BY created_at DESC, key DESC LIMIT %s",
                [*args, query.limit],
            )
            reports = [ReportSummary(**row) for row in cur.fetchall()]
            more = 0
            if len(reports) == query.limit:  # only a full page can have more behind it
                cur.execute(f"SELECT count(*) AS n FROM ma_archive_reports{condition}", args)
                row = cur.fetchone()
                more = max(0, int(row["n"]) - len(reports)) if row else 0
        return Listing(reports, [], more)

    # -- copying another archive in (`persistence.migrate`) ---------------------------------------

    @contextmanager
    def copying(
        self, counts: CopyCounts, erased: Callable[[StoredDocument], bool] = lambda item: False
    ) -> Iterator[Callable[[Sequence[StoredDocument]], None]]:
        """One connection for a copy in: yields what stores one batch of documents (in one
        transaction, counted in `counts`), and refreshes the planner's statistics once the copy is
        done, so listings use the indexes at once."""
        with self._connect() as conn:
            yield lambda items: self._copy_batch(conn, items, counts, erased)
            if counts.copied:
                conn.execute("ANALYZE ma_archive_reports")

    def _copy_batch(
        self,
        conn: Any,
        items: Sequence[StoredDocument],
        counts: CopyCounts,
        erased: Callable[[StoredDocument], bool],
    ) -> None:
        if not items:
            return
        keys = [key for key, _, _ in items]
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(_DIGESTS, (keys,))
                before = {row["key"]: bytes(row["digest"]) for row in cur.fetchall()}
                gone = {item[0] for item in items if item[0] not in before and erased(item)}
                counts.erased += len(gone)
                items = [item for item in items if item[0] not in gone]
                missing = [item for item in items if item[0] not in before]
                if missing:
                    cur.executemany(
                        f"INSERT INTO ma_archive_reports ({_INSERT_COLUMNS}) {_VALUES} "
                        "ON CONFLICT DO NOTHING",
                        [(*_row(key, document), data.decode()) for key, document, data in missing],
                    )
                    cur.execute(_DIGESTS, ([key for key, _, _ in missing],))
                    after = {row["key"]: bytes(row["digest"]) for row in cur.fetchall()}
                else:
                    after = {}
                for key, _, data in items:
                    digest = hashlib.sha256(data).digest()
                    if before.get(key) == digest:
                        counts.present += 1
                    elif key not in before and after.get(key) == digest:
                        counts.copied += 1
                    else:  # other content under the key, or its operation under another key
                        counts.conflicts.append(key)
        except psycopg.DataError as exc:
            raise ArchiveError(
                f"PostgreSQL refused a report from {source_name(items)}: {_first_line(exc)}; "
                "that batch was rolled back and the source is unchanged"
            ) from None


def source_name(items: Sequence[StoredDocument]) -> str:
    """The keys of a batch, for a message."""
    return f"the batch {items[0][0]} .. {items[-1][0]}"


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
