"""The thread index on each backend: a table beside the checkpoints in PostgreSQL, hashes with a
search index in Redis. Listing and filtering read only this; see `ports.ThreadIndex`."""

from __future__ import annotations

import re
import secrets
from dataclasses import asdict, fields
from typing import Any

from market_analyst.ports import ThreadQuery, ThreadRow

TABLE = "market_analyst_threads"
META = "market_analyst_meta"
# Threads whose memory outbox holds entries not yet in the memory store, from which one on.
OUTBOX = "market_analyst_memory_outbox"
POSTGRES_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, "
    "ticker TEXT NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, "
    "drafted_at TEXT, revision INTEGER NOT NULL DEFAULT 0, recommendation TEXT)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_update ON {TABLE} (updated_at DESC, thread_id DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_status ON {TABLE} (status, updated_at DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_user ON {TABLE} (user_id, updated_at DESC)",
    f"CREATE TABLE IF NOT EXISTS {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {OUTBOX} (thread_id TEXT PRIMARY KEY, start INTEGER NOT NULL, "
    "token TEXT NOT NULL)",
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
            cur.execute(f"DELETE FROM {OUTBOX} WHERE thread_id = %s", (thread_id,))

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

    def hold_memories(self, thread_id: str, start: int) -> str:
        token = _token()
        with self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {OUTBOX} VALUES (%s, %s, %s) ON CONFLICT (thread_id) "
                f"DO UPDATE SET start = LEAST({OUTBOX}.start, EXCLUDED.start), token = EXCLUDED.token",
                (thread_id, start, token),
            )
        return token

    def held_memories(self) -> dict[str, tuple[int, str]]:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT thread_id, start, token FROM {OUTBOX} ORDER BY thread_id")
            return {row["thread_id"]: (int(row["start"]), str(row["token"])) for row in cur.fetchall()}

    def memory_hold(self, thread_id: str) -> tuple[int, str] | None:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT start, token FROM {OUTBOX} WHERE thread_id = %s", (thread_id,))
            row = cur.fetchone()
        return (int(row["start"]), str(row["token"])) if row else None

    def release_memories(self, thread_id: str, token: str) -> bool:
        with self.conn.cursor() as cur:
            cur.execute(f"DELETE FROM {OUTBOX} WHERE thread_id = %s AND token = %s", (thread_id, token))
            return bool(cur.rowcount)


def _token() -> str:
    """A new mark of one hold: a release that names an older one leaves the newer hold in place."""
    return secrets.token_hex(8)


REDIS_PREFIX = "market-analyst:thread:"
REDIS_INDEX = "market-analyst-threads"
REDIS_COMPLETE = "market-analyst:threads:backfilled"
REDIS_OUTBOX = "market-analyst:memory-outbox"
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
        self.client.hdel(REDIS_OUTBOX, thread_id)

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

    def hold_memories(self, thread_id: str, start: int) -> str:
        # Called holding the thread's lease: no other command holds this thread's field meanwhile.
        token, held = _token(), self.memory_hold(thread_id)
        start = start if held is None else min(start, held[0])
        self.client.hset(REDIS_OUTBOX, thread_id, f"{start}:{token}")
        return token

    def held_memories(self) -> dict[str, tuple[int, str]]:
        found = self.client.hgetall(REDIS_OUTBOX)
        return {_text(k): _hold(v) for k, v in sorted(found.items())}

    def memory_hold(self, thread_id: str) -> tuple[int, str] | None:
        value = self.client.hget(REDIS_OUTBOX, thread_id)
        return None if value is None else _hold(value)

    def release_memories(self, thread_id: str, token: str) -> bool:
        # Only the hold `token` names: compared and deleted in one step on the server.
        script = (
            "local v = redis.call('HGET', KEYS[1], ARGV[1]) "
            "if v and string.sub(v, -string.len(ARGV[2]) - 1) == ':' .. ARGV[2] then "
            "return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0"
        )
        return bool(self.client.eval(script, 1, REDIS_OUTBOX, thread_id, token))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _hold(value: Any) -> tuple[int, str]:
    start, _, token = _text(value).partition(":")
    return int(start), token


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
