"""The thread index on each backend: a table beside the checkpoints in PostgreSQL, hashes with a
search index in Redis. Listing and filtering read only this; see `ports.ThreadIndex`."""

from __future__ import annotations

import re
from dataclasses import asdict, fields
from typing import Any

from market_analyst.ports import ThreadQuery, ThreadRow

TABLE = "market_analyst_threads"
META = "market_analyst_meta"
POSTGRES_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, "
    "ticker TEXT NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, "
    "drafted_at TEXT, revision INTEGER NOT NULL DEFAULT 0, recommendation TEXT)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_update ON {TABLE} (updated_at DESC, thread_id DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_status ON {TABLE} (status, updated_at DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_user ON {TABLE} (user_id, updated_at DESC)",
    f"CREATE TABLE IF NOT EXISTS {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
_COLUMNS = [f.name for f in fields(ThreadRow)]
_COMPLETE = "threads-backfilled"


class PostgresThreadIndex:
    """`ports.ThreadIndex` in a table of the checkpoint database (created with the saver's tables)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def record(self, row: ThreadRow) -> None:
        values = asdict(row)
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _COLUMNS[1:])
        placeholders = ", ".join(f"%({c})s" for c in _COLUMNS)
        with self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES ({placeholders}) "
                f"ON CONFLICT (thread_id) DO UPDATE SET {updates}",
                values,
            )

    def remove(self, thread_id: str) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"DELETE FROM {TABLE} WHERE thread_id = %s", (thread_id,))

    def owner(self, thread_id: str) -> str | None:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT user_id FROM {TABLE} WHERE thread_id = %s", (thread_id,))
            row = cur.fetchone()
        return str(row["user_id"]) if row else None

    def query(self, query: ThreadQuery) -> tuple[list[ThreadRow], int]:
        where: list[str] = []
        args: list[Any] = []
        if query.statuses:
            where.append("status = ANY(%s)")
            args.append(list(query.statuses))
        for column, value in (("user_id", query.user_id), ("ticker", query.ticker)):
            if value is not None:
                where.append(f"{column} = %s")
                args.append(value)
        if query.finished_before is not None:
            where.append("updated_at <= %s")
            args.append(query.finished_before)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT count(*) AS n FROM {TABLE}{clause}", args)
            total = int(cur.fetchone()["n"])
            cur.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM {TABLE}{clause} ORDER BY updated_at DESC, thread_id DESC "
                "LIMIT %s OFFSET %s",
                [*args, query.limit, query.offset],
            )
            rows = [ThreadRow(**row) for row in cur.fetchall()]
        return rows, total

    def ids(self) -> set[str]:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT thread_id FROM {TABLE}")
            return {row["thread_id"] for row in cur.fetchall()}

    def complete(self) -> bool:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT 1 AS found FROM {META} WHERE key = %s", (_COMPLETE,))
            return cur.fetchone() is not None

    def mark_complete(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"INSERT INTO {META} VALUES (%s, 'yes') ON CONFLICT (key) DO NOTHING", (_COMPLETE,))


REDIS_PREFIX = "market-analyst:thread:"
REDIS_INDEX = "market-analyst-threads"
REDIS_COMPLETE = "market-analyst:threads:backfilled"
_TAG_SPECIAL = re.compile(r"([^A-Za-z0-9_])")


def _tag(value: str) -> str:
    """A value as a RediSearch tag query term: every punctuation character escaped."""
    return "{" + _TAG_SPECIAL.sub(r"\\\1", value) + "}"


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


class RedisThreadIndex:
    """`ports.ThreadIndex` as one hash per thread, searched through a RediSearch index."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def setup(self) -> None:
        """Create the search index unless it exists (another process may create it meanwhile)."""
        from redis.commands.search.field import NumericField, TagField
        from redis.commands.search.index_definition import IndexDefinition, IndexType
        from redis.exceptions import ResponseError

        schema = (
            TagField("user_id", case_sensitive=True),
            TagField("ticker", case_sensitive=True),
            TagField("status"),
            NumericField("updated", sortable=True),
        )
        definition = IndexDefinition(prefix=[REDIS_PREFIX], index_type=IndexType.HASH)
        try:
            self.client.ft(REDIS_INDEX).create_index(schema, definition=definition)
        except ResponseError as exc:
            if "already exists" not in str(exc):
                raise

    def record(self, row: ThreadRow) -> None:
        values = {k: ("" if v is None else str(v)) for k, v in asdict(row).items()}
        values["updated"] = str(_epoch(row.updated_at))
        self.client.hset(REDIS_PREFIX + row.thread_id, mapping=values)

    def remove(self, thread_id: str) -> None:
        self.client.delete(REDIS_PREFIX + thread_id)

    def owner(self, thread_id: str) -> str | None:
        value = self.client.hget(REDIS_PREFIX + thread_id, "user_id")
        return value.decode() if isinstance(value, bytes) else value

    def query(self, query: ThreadQuery) -> tuple[list[ThreadRow], int]:
        from redis.commands.search.query import Query

        terms = []
        if query.statuses:
            terms.append("@status:{" + " | ".join(query.statuses) + "}")
        if query.user_id is not None:
            terms.append(f"@user_id:{_tag(query.user_id)}")
        if query.ticker is not None:
            terms.append(f"@ticker:{_tag(query.ticker)}")
        if query.finished_before is not None:
            terms.append(f"@updated:[-inf {_epoch(query.finished_before)}]")
        search = Query(" ".join(terms) or "*").sort_by("updated", asc=False)
        search = search.paging(query.offset, query.limit).dialect(2)
        result = self.client.ft(REDIS_INDEX).search(search)
        rows = [_row_of(doc.__dict__) for doc in result.docs]
        return rows, int(result.total)

    def ids(self) -> set[str]:
        # The index's own keys (not the checkpoint data): one hash per thread under the prefix.
        return {
            key.decode()[len(REDIS_PREFIX) :] for key in self.client.scan_iter(f"{REDIS_PREFIX}*", count=1000)
        }

    def complete(self) -> bool:
        return bool(self.client.exists(REDIS_COMPLETE))

    def mark_complete(self) -> None:
        self.client.set(REDIS_COMPLETE, "yes")


def _row_of(doc: dict[str, Any]) -> ThreadRow:
    def text(name: str) -> str | None:
        value = doc.get(name)
        value = value.decode() if isinstance(value, bytes) else value
        return value or None

    return ThreadRow(
        thread_id=str(text("thread_id")),
        user_id=text("user_id") or "",
        ticker=text("ticker") or "",
        status=str(text("status")),
        created_at=str(text("created_at")),
        updated_at=str(text("updated_at")),
        drafted_at=text("drafted_at"),
        revision=int(text("revision") or 0),
        recommendation=text("recommendation"),
    )
