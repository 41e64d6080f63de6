"""Approvers of the web inbox and the session secret in the PostgreSQL records database
(`MA_RECORDS=postgres`), the twin of `files.py` for servers on several hosts.

One row an approver: its name, its token's ID, the argon2 hash of the token, when it was made and
its role. As with the file, the token itself is never stored and is shown once. A server remembers
the digests of tokens it verified, but checks on every use that the approver still holds a token
with that ID, so a removal (or a new token) made anywhere takes effect at the next request.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from typing import Any

from market_analyst.errors import UserError
from market_analyst.persistence.approvers.base import ApproverRules, approver_of, verifies, well_formed
from market_analyst.persistence.postgres.records import RecordsTables
from market_analyst.persistence.postgres.server import PostgresServer
from market_analyst.ports import Approver

COMPONENT = "approvers"
MIGRATIONS = (
    # One statement a version: the connection prepares every statement it runs.
    """
    CREATE TABLE ma_approvers (
        name text PRIMARY KEY,
        token_id text NOT NULL UNIQUE,
        token_hash text NOT NULL,
        created_at text NOT NULL,
        role text NOT NULL DEFAULT 'approver'
    )
    """,
    """
    CREATE TABLE ma_session_secret (
        id integer PRIMARY KEY CHECK (id = 1),
        secret text NOT NULL
    )
    """,
    "ALTER TABLE ma_approvers ADD COLUMN email text",
)
_COLUMNS = "name, token_id, token_hash, created_at, role, email"


class PostgresApproverStore(ApproverRules):
    """The approvers and the session secret in the records database on `server`."""

    def __init__(self, server: PostgresServer) -> None:
        self.tables = RecordsTables(server, COMPONENT, MIGRATIONS)
        self._verified: dict[bytes, tuple[str, str]] = {}  # token digest -> (name, token ID)
        self._lock = threading.Lock()

    def _entry(self, name: str) -> dict[str, Any] | None:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM ma_approvers WHERE name = %s", (name,))
            row: dict[str, Any] | None = cur.fetchone()
        return row

    # -- managing approvers -----------------------------------------------------------------------

    def _insert(self, entry: dict[str, Any]) -> bool:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO ma_approvers ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (name) DO NOTHING RETURNING name",
                (
                    entry["name"],
                    entry["token_id"],
                    entry["token_hash"],
                    entry["created_at"],
                    entry["role"],
                    entry.get("email"),
                ),
            )
            return cur.fetchone() is not None

    def remove(self, name: str) -> bool:
        """Remove an approver; its token and sessions stop working. False when there was none."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM ma_approvers WHERE name = %s RETURNING name", (name,))
            return cur.fetchone() is not None

    def _change_role(self, name: str, role: str) -> bool:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("UPDATE ma_approvers SET role = %s WHERE name = %s RETURNING name", (role, name))
            return cur.fetchone() is not None

    def _change_email(self, name: str, email: str | None) -> bool:
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("UPDATE ma_approvers SET email = %s WHERE name = %s RETURNING name", (email, name))
            return cur.fetchone() is not None

    def stored(self) -> list[dict[str, Any]]:
        """Every approver's row (with its token hash, never a token), by name."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM ma_approvers ORDER BY name")
            # As the file keeps them: an approver without an address has no `email` key.
            return [{k: v for k, v in row.items() if k != "email" or v is not None} for row in cur.fetchall()]

    def put_stored(self, entries: list[dict[str, Any]]) -> tuple[int, int]:
        """Add approvers as another store holds them (their token hashes kept, so their tokens keep
        working), in one transaction: (added, held already). An approver held under the same name
        with another token or role is refused, and then none is added."""
        added = present = 0
        with self.tables.connect() as conn, conn.transaction(), conn.cursor() as cur:
            for entry in entries:
                row = {
                    "name": entry["name"],
                    "token_id": entry["token_id"],
                    "token_hash": entry["token_hash"],
                    "created_at": entry["created_at"],
                    "role": entry.get("role", "approver"),
                    "email": entry.get("email"),
                }
                cur.execute(
                    f"INSERT INTO ma_approvers ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING name",
                    tuple(row.values()),
                )
                if cur.fetchone() is not None:
                    added += 1
                    continue
                cur.execute(f"SELECT {_COLUMNS} FROM ma_approvers WHERE name = %s", (row["name"],))
                held = cur.fetchone() or {}
                # The same approver (name, token, role): its address stays the database's.
                if any(held.get(k) != v for k, v in row.items() if k != "email"):
                    raise UserError(
                        f"approver {row['name']!r} is in the records database already with another token "
                        "or role (or its token ID is another approver's); nothing was copied: remove it "
                        "there first (market-analyst approvers remove NAME with MA_RECORDS=postgres)"
                    )
                present += 1
        return added, present

    # -- signing in -------------------------------------------------------------------------------

    def recognised(self, token: str) -> Approver | None:
        """The approver of a token this process has verified before, while that approver still holds
        it; None otherwise. Costs no argon2 verification."""
        if not well_formed(token):
            return None
        digest = hashlib.sha256(token.encode()).digest()
        with self._lock:
            known = self._verified.get(digest)
        return None if known is None else self._holder(*known)

    def knows_token_id(self, token_id: str) -> bool:
        """Whether some approver's token has this ID (the ID is not the secret)."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT 1 FROM ma_approvers WHERE token_id = %s",
                (token_id.encode("utf-8", "replace").decode(),),
            )
            return cur.fetchone() is not None

    def authenticate(self, token: str) -> Approver | None:
        """The approver whose token this is, or None; secrets are compared only by argon2."""
        if not well_formed(token):
            return None
        digest = hashlib.sha256(token.encode()).digest()
        with self._lock:
            known = self._verified.get(digest)
        if known is not None:
            return self._holder(*known)
        token_id = token.split(".", 1)[0]
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM ma_approvers WHERE token_id = %s", (token_id,))
            row = cur.fetchone()
        if not verifies(row, token) or row is None:
            return None
        with self._lock:
            self._verified[digest] = (row["name"], row["token_id"])
        return approver_of(row)

    # -- the session secret -----------------------------------------------------------------------

    def stored_session_secret(self) -> str | None:
        """The session secret if one was made (None otherwise); makes none."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT secret FROM ma_session_secret WHERE id = 1")
            row = cur.fetchone()
        return None if row is None else str(row["secret"])

    def put_session_secret(self, secret: str) -> bool:
        """Keep `secret` as the session secret unless there is one: True when it was kept."""
        with self.tables.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO ma_session_secret (id, secret) VALUES (1, %s) "
                "ON CONFLICT DO NOTHING RETURNING id",
                (secret,),
            )
            return cur.fetchone() is not None

    def session_secret(self) -> str:
        """The key that signs session cookies: made once, by whichever process asks first, and shared
        by every server on every host."""
        secret = self.stored_session_secret()
        if secret is None:
            self.put_session_secret(secrets.token_hex(32))  # another process may have made it first
            secret = self.stored_session_secret()
        if secret is None:
            raise UserError("the session secret could not be kept in the records database")
        return secret
