"""Copying the approval stores from the data directory's files into the PostgreSQL records database
(`market-analyst records migrate --to postgres`): store to store, safe to run again, and never over a
different value the database holds already (that is refused, naming what differs).

Sessions and failed sign-in counts are not copied: they are short-lived, and approvers sign in again.
"""

from __future__ import annotations

from market_analyst.errors import UserError
from market_analyst.persistence.approvals.approvers import ApproverStore
from market_analyst.persistence.approvals.audit import AuditLog
from market_analyst.persistence.approvals.postgres_approvers import PostgresApproverStore
from market_analyst.persistence.approvals.postgres_audit import PostgresAuditLog


def copy_approvers(source: ApproverStore, target: PostgresApproverStore) -> tuple[int, int]:
    """Copy every approver (its token hash, so its token keeps working) and the session secret (so
    signed-in sessions stay signed in): (copied, present already), counting the secret as one.
    An approver or secret the target holds with another value is refused before anything is copied."""
    secret = source.stored_session_secret()
    held = target.stored_session_secret()
    if secret is not None and held is not None and held != secret:
        raise UserError(
            "the records database has a session secret of its own, not the data directory's; nothing "
            "was copied (keeping either signs the other's sessions out: delete one to choose)"
        )
    copied, present = target.put_stored(source.stored())
    if secret is not None:
        if target.put_session_secret(secret):
            copied += 1
        elif target.stored_session_secret() == secret:
            present += 1
        else:
            raise UserError(
                "another process made a session secret in the records database during the copy; the "
                "approvers were copied, the secret was not: run the copy again"
            )
    return copied, present


def copy_audit(source: AuditLog, target: PostgresAuditLog) -> tuple[int, int]:
    """Copy the audit log's entries in order, as they are stored (numbers, links, hashes): (copied,
    present already). The source must verify first, and the target after; a target that holds
    entries the source does not, or different ones, is refused."""
    found = source.verify()
    if found.problem is not None:
        raise UserError(f"the audit log does not verify ({found.problem}); nothing was copied")
    copied = present = 0
    for entry in source.stored():
        if target.append_stored(entry):
            copied += 1
        else:
            present += 1
    after = target.verify()
    if after.problem is not None:
        raise UserError(f"the copied audit log does not verify: {after.problem}")
    if after.entries != found.entries:
        raise UserError(
            f"the records database's audit log has {after.entries} entries, the data directory's "
            f"{found.entries}: it holds entries of its own, so the two logs were not merged"
        )
    return copied, present
