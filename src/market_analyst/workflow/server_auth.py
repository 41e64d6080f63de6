"""Who may do what through LangGraph's own server (`langgraph dev`, `langgraph up`): the rules behind
`graphs/auth.py`, the `langgraph_sdk.Auth` handler that `langgraph.json` names.

A caller is whoever's token (`Authorization: Bearer <token>`, from `market-analyst approvers add`)
the approvers store recognises, the same store and tokens as the web inbox; the role is read from
that store on every request. What each role may do on the server:

- requester: start analyses for themself, and see, search and run only their own threads;
- reviewer, approver: also read every thread and answer the gate (the gate itself decides whether
  their role may revise, approve or reject);
- operator: also write a thread's state, send `Command(goto=..., update=...)`, copy and delete
  threads, start runs for another user, and change assistants and crons: the repairs. None of it can
  make a report publish (`nodes/publish.py` publishes only what sealed approvals prove).

LangGraph's store API is closed to everyone: the project keeps profiles and memories in its own stores.
Nothing here imports `langgraph_sdk`, so the rules are tested without a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from market_analyst.choices import ROLES
from market_analyst.deps import open_approvers
from market_analyst.settings import Settings

# The answer of a rule: True (allowed), False (403), or a metadata filter the server applies.
Verdict = bool | dict[str, Any]
OPERATOR = "operator"
REQUESTER = "requester"
# What a run's configuration names to start from an earlier checkpoint (a fork).
FORK_KEYS = ("checkpoint_id", "checkpoint_map", "checkpoint")


@dataclass(frozen=True)
class Caller:
    """An authenticated caller of the server: their name and role."""

    identity: str
    role: str

    def to_user(self) -> dict[str, Any]:
        """What the auth handler returns for the server (and, through it, the graph) to know them by."""
        return {
            "identity": self.identity,
            "display_name": self.identity,
            "role": self.role,
            "permissions": [self.role],
            "is_authenticated": True,
        }


def caller_of(settings: Settings, authorization: str | None) -> Caller | None:
    """The caller a request's `Authorization` header names, or None (no header, not a bearer token,
    or a token the approvers store does not know)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    approver = open_approvers(settings).authenticate(token.strip())
    if approver is None or approver.role not in ROLES:
        return None
    return Caller(approver.name, approver.role)


def caller_from(user: Any) -> Caller:
    """The `Caller` of a server's auth context user (what `Caller.to_user` made)."""
    getter = user.get if isinstance(user, Mapping) else lambda key, default=None: getattr(user, key, default)
    return Caller(str(getter("identity", "") or ""), str(getter("role", "") or ""))


def _own(caller: Caller) -> dict[str, Any]:
    return {"owner": caller.identity}


def on_thread_create(caller: Caller, value: dict[str, Any], owner: str | None = None) -> Verdict:
    """A new thread is owned by its caller. A copy (which arrives with no metadata of its own and
    keeps the original's) is an operator's repair. A thread the project already has (`owner`, by
    its thread index: started by a command, or on this server before a restart) keeps its owner: a
    requester may reach only their own, and the others reach any by its ID, to decide it."""
    if "metadata" not in value and caller.role != OPERATOR:
        return False
    if owner is not None and caller.role == REQUESTER and owner != caller.identity:
        return False
    metadata = value.get("metadata")
    if not isinstance(metadata, dict):  # changed in place: the server goes on with the same dict
        metadata = value["metadata"] = {}
    metadata["owner"] = owner if owner is not None else caller.identity
    if owner is not None:
        metadata["user_id"] = owner
    elif caller.role != OPERATOR or "user_id" not in metadata:
        metadata["user_id"] = caller.identity
    # As a filter too: a create that finds the thread already there (`if_exists="do_nothing"`)
    # returns it only to its owner.
    return True if caller.role == OPERATOR else _own(caller) if owner is None else {"owner": owner}


def on_thread_read(caller: Caller, value: dict[str, Any], owner: str | None = None) -> Verdict:
    """Requesters read and search their own threads; the others read every thread (they review). A
    thread the project already has (`owner`) is a requester's to read only if it is theirs, whatever
    this server's record of it says (a record made for an ID before the thread existed)."""
    if caller.role != REQUESTER:
        return True
    if owner is not None and owner != caller.identity:
        # A filter no record can meet (a requester's record names them as both owner and user, one
        # made for the thread names its owner as both): 404, as for any thread that is not theirs.
        return {"owner": caller.identity, "user_id": owner}
    return _own(caller)


def on_thread_update(caller: Caller, value: dict[str, Any]) -> Verdict:
    """A state write or a metadata patch is an operator's; interrupting a run (a cancel that keeps
    the state) is for anyone who may read the thread."""
    if value.get("action") == "interrupt":
        return on_thread_read(caller, value)
    return operators_only(caller, value)


def operators_only(caller: Caller, value: dict[str, Any]) -> Verdict:
    """State writes, metadata patches, deletes, assistants' changes, crons: repairs."""
    return caller.role == OPERATOR


def on_run(caller: Caller, value: dict[str, Any], owner: str | None = None) -> Verdict:
    """A run: a requester's only on their own threads and for themself; a command that routes the
    graph (`goto`) or writes its state (`update`) is an operator's; an input's `user_id` is the
    caller's unless an operator starts the run. A thread the project already has (`owner`) is a
    requester's only if it is theirs, whether or not this server has a record of it."""
    if owner is not None and caller.role == REQUESTER and owner != caller.identity:
        return False
    if value.get("multitask_strategy") == "rollback":
        # It would delete the checkpoints of the run it cancels, which may have recorded a decision
        # the audit log keeps, or a publication the archive keeps: refused for everyone.
        return False
    kwargs = value.get("kwargs") or {}
    command = kwargs.get("command") or {}
    if isinstance(command, Mapping) and (command.get("goto") or command.get("update")):
        if caller.role != OPERATOR:
            return False
    # A run from an earlier checkpoint is a fork, whose gate would replay the answer saved there in
    # this caller's name: an operator's repair too.
    configurable = (kwargs.get("config") or {}).get("configurable") or {}
    if any(configurable.get(key) for key in FORK_KEYS) and caller.role != OPERATOR:
        return False
    run_input = kwargs.get("input")
    if isinstance(run_input, dict) and caller.role != OPERATOR and owner not in (None, caller.identity):
        return False  # a new analysis on another user's thread would make it the caller's
    if isinstance(run_input, dict) and caller.role != OPERATOR:
        named = run_input.get("user_id")
        if named not in (None, "", caller.identity):
            return False
        if "ticker" in run_input:
            run_input["user_id"] = caller.identity
    metadata = value.get("metadata")
    if isinstance(metadata, dict):  # a thread this run creates (if_not_exists="create") is its owner's
        metadata["owner"] = owner if owner is not None else caller.identity
        if owner is not None:
            metadata["user_id"] = owner
        elif caller.role != OPERATOR:
            metadata["user_id"] = caller.identity
    return _own(caller) if caller.role == REQUESTER else True
