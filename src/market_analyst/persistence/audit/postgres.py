"""The audit log in the PostgreSQL records database (`MA_RECORDS=postgres`): the same hash chain
(`base.py`) as the file log (`files.py`), one row an entry, so every host appends to one chain.

A row holds an entry exactly as the file log stores its line (canonical JSON), under its number
(`seq`, the primary key) and its `event_id` (a unique key: a repeated event is found, not scanned
for). The head row (`ma_audit_head`) holds the last entry's number and hash, as `audit.head` does;
an append locks it (`SELECT ... FOR UPDATE`) in the transaction that adds the entry, so any number
of writers append in one order, and entries cut from the end are noticed by `verify`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from market_analyst.errors import UserError
from market_analyst.persistence.audit.base import (
    GENESIS,
    AuditChain,
    NotCopied,
    canonical,
    carried_entry,
    erase,
    next_entry,
    same_event,
)
from market_analyst.persistence.postgres.records import RecordsTables
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.ports import AuditEvent

COMPONENT = "audit"
MIGRATIONS = (
    # One statement a version: the connection prepares every statement it runs.
    """
    CREATE TABLE ma_audit_entries (
        seq bigint PRIMARY KEY,
        event_id text NOT NULL UNIQUE,
        thread_id text,
        body text NOT NULL
    )
    """,
    "CREATE INDEX ma_audit_entries_thread ON ma_audit_entries (thread_id, seq)",
    """
    CREATE TABLE ma_audit_head (
        id integer PRIMARY KEY CHECK (id = 1),
        seq bigint NOT NULL,
        hash text NOT NULL
    )
    """,
    "INSERT INTO ma_audit_head (id, seq, hash) VALUES (1, 0, repeat('0', 64))",
)


class PostgresAuditLog(AuditChain):
    """The hash-chained audit log in the records database on `server`."""

    NO_HEAD = "the log's head row (ma_audit_head) is missing"

    def __init__(self, server: PostgresServer) -> None:
        self.tables = RecordsTables(server, COMPONENT, MIGRATIONS)

    # -- writing ----------------------------------------------------------------------------------

    def _lock_head(self, cur: Any) -> dict[str, Any] | None:
        """The last entry's number and hash, locked until the transaction ends (None: no entry)."""
        cur.execute("SELECT seq, hash FROM ma_audit_head WHERE id = 1 FOR UPDATE")
        head = cur.fetchone()
        if head is None:
            raise UserError(
                f"the audit log cannot be appended to: {self.NO_HEAD}; run 'market-analyst audit verify'"
            )
        return None if head["seq"] == 0 else {"seq": int(head["seq"]), "hash": head["hash"]}

    @staticmethod
    def _insert(cur: Any, entry: dict[str, Any]) -> None:
        cur.execute(
            "INSERT INTO ma_audit_entries (seq, event_id, thread_id, body) VALUES (%s, %s, %s, %s)",
            (entry["seq"], entry["event_id"], entry.get("thread_id"), canonical(entry)),
        )
        cur.execute(
            "UPDATE ma_audit_head SET seq = %s, hash = %s WHERE id = 1", (entry["seq"], entry["hash"])
        )

    def append(self, event: AuditEvent) -> dict[str, Any]:
        """Append `event` as the next entry of the chain and return it; an event whose `event_id` the
        log holds already is not appended again (the earlier entry is returned)."""
        with self.tables.connect() as conn, conn.transaction(), conn.cursor() as cur:
            last = self._lock_head(cur)
            cur.execute("SELECT seq, body FROM ma_audit_entries WHERE event_id = %s", (event.event_id,))
            found = cur.fetchone()
            if found is not None:
                return self._parse(found["body"], found["seq"])
            entry = next_entry(event, last)
            self._insert(cur, entry)
        return entry

    def append_stored(self, entry: dict[str, Any], *, carry: bool = False, names: Sequence[str] = ()) -> str:
        """Append an entry another log stored: "copied" when it follows the log's last entry (it keeps
        its number, links and hashes), "present" when the log holds that event already (as it was, as
        carried, or with its personal content erased here since). With `carry`, an entry that does not
        follow (this log has entries of its own since the copy) is appended after them, its content as
        it was and `copied_from` naming where it stood: "carried". Otherwise `NotCopied` names it.

        An erasure entry, whose `names` are the events of the entries it erased, is taken only when
        this log holds each of them erased: as it is where it follows, and as present otherwise (this
        log recorded that erasure itself). One that would claim an erasure this log has not made, and
        an entry erased at the source that this log never held, are named instead."""
        name = f"audit entry {entry.get('seq')} ({entry.get('event_id')})"
        with self.tables.connect() as conn, conn.transaction(), conn.cursor() as cur:
            last = self._lock_head(cur)
            cur.execute(
                "SELECT seq, body FROM ma_audit_entries WHERE event_id = %s", (entry.get("event_id"),)
            )
            found = cur.fetchone()
            if found is not None:
                if found["body"] == canonical(entry) or same_event(
                    self._parse(found["body"], found["seq"]), entry
                ):
                    return "present"
                if entry.get("personal") == {"erased": True}:
                    raise NotCopied(
                        f"{name} was erased in the data directory after the copy, and not in the records "
                        f"database (entry {found['seq']}): run the same forget there",
                        held=True,
                    )
                raise NotCopied(
                    f"{name} differs from entry {found['seq']}, which the records database holds under "
                    "that event",
                    held=True,
                )
            expected = (last["seq"] + 1) if last else 1
            link = last["hash"] if last else GENESIS
            follows = entry.get("seq") == expected and entry.get("prev") == link
            if entry.get("action") == "erased":
                if not self._all_erased(cur, names):
                    raise NotCopied(
                        f"{name} records an erasure made in the data directory after the copy, of entries "
                        "the records database still holds in full: run the same forget there",
                        held=True,
                    )
                if not follows:
                    return "present"  # erased here too, and recorded by this log's own erasure entry
            if follows:
                self._insert(cur, entry)
                return "copied"
            if not carry:
                raise NotCopied(f"{name} does not follow the records database's last entry ({expected - 1})")
            if entry.get("personal") == {"erased": True}:
                raise NotCopied(
                    f"{name} was written and erased in the data directory after the copy: the records "
                    "database never held it, and nothing of it is left to carry",
                    held=True,
                )
            self._insert(cur, carried_entry(entry, last))
        return "carried"

    @staticmethod
    def _all_erased(cur: Any, events: Sequence[str]) -> bool:
        """Whether this log holds every one of `events` with its personal content erased."""
        if not events:
            return True
        cur.execute("SELECT seq, body FROM ma_audit_entries WHERE event_id = ANY(%s)", (list(events),))
        rows = cur.fetchall()
        held = [json.loads(row["body"]) for row in rows]
        return len(held) == len(set(events)) and all(e.get("personal") == {"erased": True} for e in held)

    def erase_user(self, user_id: str, at: str) -> int:
        """Replace `user_id`'s personal content in every entry with an erasure marker and record the
        erasure as an entry of its own, as the file log does; how many entries were erased."""
        with self.tables.connect() as conn, conn.transaction(), conn.cursor() as cur:
            last = self._lock_head(cur)
            cur.execute("SELECT seq, body FROM ma_audit_entries ORDER BY seq")
            entries = [self._parse(row["body"], row["seq"]) for row in cur.fetchall()]
            erased, marker = erase(entries, user_id, at)
            if marker is None or last is None:
                return 0
            for entry in entries:
                if int(entry["seq"]) in erased:
                    cur.execute(
                        "UPDATE ma_audit_entries SET body = %s WHERE seq = %s",
                        (canonical(entry), entry["seq"]),
                    )
            self._insert(cur, marker)
        return len(erased)

    # -- reading ----------------------------------------------------------------------------------

    @staticmethod
    def _parse(stored: bytes | str, number: int) -> dict[str, Any]:
        try:
            entry = json.loads(stored)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            raise UserError(f"audit entry {number} is not a JSON object: run 'market-analyst audit verify'")
        return entry

    def _chain(self) -> tuple[list[tuple[int, bytes]], dict[str, Any] | None]:
        with self.tables.connect() as conn, conn.transaction(), conn.cursor() as cur:
            # One snapshot for the entries and the head: read committed would let an append that
            # commits between the two statements show a head past the entries read (a false alarm).
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("SELECT seq, body FROM ma_audit_entries ORDER BY seq")
            rows = [(int(row["seq"]), str(row["body"]).encode()) for row in cur.fetchall()]
            cur.execute("SELECT seq, hash FROM ma_audit_head WHERE id = 1")
            head = cur.fetchone()
        return rows, (None if head is None else {"seq": int(head["seq"]), "hash": head["hash"]})

    def _thread_entries(self, thread_id: str | None) -> list[dict[str, Any]]:
        with self.tables.connect() as conn, conn.cursor() as cur:
            if thread_id is None:
                cur.execute("SELECT seq, body FROM ma_audit_entries ORDER BY seq")
            else:
                cur.execute(
                    "SELECT seq, body FROM ma_audit_entries WHERE thread_id = %s ORDER BY seq", (thread_id,)
                )
            rows = cur.fetchall()
        return [self._parse(row["body"], row["seq"]) for row in rows]
