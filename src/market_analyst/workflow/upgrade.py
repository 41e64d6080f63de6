"""Threads written by an earlier version: which state schema wrote them, and how a decision made on
them today reads them.

A draft may wait at the gate for days, and a new version may be deployed in between. The graph only
loads the state keys it declares, so a key that a later version removes or renames would silently
vanish from a waiting thread (and a gate keyed on it could re-interrupt for ever). Hence:

- every thread records the `schema_version` of the code that started it (absent: schema 1, written
  by 0.1.0 or earlier);
- `STATE_KEYS` lists the state's keys for each schema, and a test compares the newest entry with
  `AnalystState` itself, so a key cannot change without a new entry here;
- each schema but the newest has a `Migration` to the next, which must account for every key the
  next schema no longer has (removed, or renamed into another key), and turns the thread's saved
  values into the updates that bring it to the next schema;
- a decision (`approve`, `reject`, `revise`) reads the thread's raw saved values (including keys this
  version no longer declares), applies the migrations in order, and writes the result with its own
  update, in one checkpoint. A thread written by a newer schema than this code knows is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from market_analyst.errors import UserError
from market_analyst.state import SCHEMA_VERSION
from market_analyst.workflow.views import config_for

# The state's keys per schema. Append a new entry (never edit an old one) when `AnalystState` changes.
STATE_KEYS: dict[int, frozenset[str]] = {
    1: frozenset(
        {
            "ticker",
            "question",
            "user_id",
            "profile",
            "overrides",
            "market",
            "analysis",
            "feedback",
            "messages",
            "agent_steps",
            "draft",
            "drafted_at",
            "started_at",
            "approval",
            "publication",
        }
    ),  # fmt: skip
}
# Schema 2: the thread records its schema, and the interrupt gate keeps the draft's approvals so far
# and the decision it accepted until record_decision applies it.
STATE_KEYS[2] = STATE_KEYS[1] | {"schema_version", "approvals", "decision"}
# Schema 3: the memories `recall` found for the run.
STATE_KEYS[3] = STATE_KEYS[2] | {"recalled"}
# Schema 4: why the gate's last answer was not taken (it asks again instead of failing the run); the
# approvals and the decision are sealed by the gate.
STATE_KEYS[4] = STATE_KEYS[3] | {"refused"}
# Schema 5: the memories the thread's decisions and publication leave, until the store holds them.
STATE_KEYS[5] = STATE_KEYS[4] | {"memory_outbox"}
# Schema 6: the draft whose expiry was recorded (MA_EXPIRE_AFTER).
STATE_KEYS[6] = STATE_KEYS[5] | {"expired"}

# The released versions whose threads carry each schema, for messages an operator reads.
WRITTEN_BY: dict[int, str] = {
    1: "market-analyst 0.1.0 or earlier",
    2: "a version of market-analyst after 0.1.0",
    3: "a version of market-analyst that recalls memories",
    4: "a version of market-analyst that seals decisions",
    5: "a version of market-analyst that records decisions before their memories",
    6: "a version of market-analyst that keeps due times",
}


@dataclass(frozen=True)
class Migration:
    """How a thread of schema `source` is read as schema `source + 1`.

    `carries` names, for every key the next schema no longer has, the key its value moves to (None:
    dropped on purpose, with the reason in `apply`'s docstring). `apply` gets the thread's raw saved
    values and returns the state updates that bring it to the next schema."""

    source: int
    apply: Callable[[dict[str, Any]], dict[str, Any]]
    carries: dict[str, str | None] = field(default_factory=dict)


def _schema_1_to_2(values: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 adds keys and removes none: `schema_version`; `approvals` and `decision`, which a
    thread of schema 1 has none of (its gate was static, and a recorded decision is in `approval`,
    read as before). Every other key means what it meant."""
    return {"schema_version": 2}


def _schema_2_to_3(values: dict[str, Any]) -> dict[str, Any]:
    """Schema 3 adds `recalled` and removes nothing. A thread of schema 2 recalled nothing (its run
    had no recall step), which is what an absent `recalled` already says, so it stays absent: the
    draft it waits with is the draft the person reads, and it is not made again."""
    return {"schema_version": 3}


def _schema_3_to_4(values: dict[str, Any]) -> dict[str, Any]:
    """Schema 4 adds `refused` and removes nothing: a thread of schema 3 was refused nothing at its
    gate (a refusal failed the run there), which is what an absent `refused` says. Its approvals so
    far were recorded before decisions were sealed, so they no longer count: a thread waiting for
    a quorum is asked for those approvals again."""
    return {"schema_version": 4}


def _schema_4_to_5(values: dict[str, Any]) -> dict[str, Any]:
    """Schema 5 adds `memory_outbox` and removes nothing: a thread of schema 4 wrote each decision's
    memory straight into the memory store, so none of its memories waits, which is what an absent
    outbox says."""
    return {"schema_version": 5}


def _schema_5_to_6(values: dict[str, Any]) -> dict[str, Any]:
    """Schema 6 adds `expired` and removes nothing: no draft of a thread of schema 5 had its expiry
    recorded (drafts did not expire), which is what an absent `expired` says. Its draft's due times
    are counted from its `drafted_at` under today's settings, as a new draft's are."""
    return {"schema_version": 6}


MIGRATIONS: dict[int, Migration] = {
    1: Migration(source=1, apply=_schema_1_to_2),
    2: Migration(source=2, apply=_schema_2_to_3),
    3: Migration(source=3, apply=_schema_3_to_4),
    4: Migration(source=4, apply=_schema_4_to_5),
    5: Migration(source=5, apply=_schema_5_to_6),
}


def schema_of(values: dict[str, Any]) -> int:
    """The schema a thread's saved values were written in."""
    version = values.get("schema_version")
    return version if isinstance(version, int) and version >= 1 else 1


def written_by(version: int) -> str:
    """Which release wrote a thread of this schema, in words."""
    newer = f"a version of market-analyst newer than this one (state schema {version})"
    return WRITTEN_BY.get(version, newer)


def raw_values(run: Any, thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """The saved values of the thread's latest checkpoint (or of `checkpoint_id`) as stored, including
    keys this version's graph no longer declares (which the graph's own reads leave out)."""
    config = config_for(thread_id)
    if checkpoint_id is not None:
        config["configurable"] |= {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""}
    saved = run.backend.saver.get_tuple(config)
    return dict(saved.checkpoint.get("channel_values") or {}) if saved is not None else {}


def refuse_newer(thread_id: str, values: dict[str, Any]) -> None:
    """A thread written by a newer schema than this code knows cannot be read safely: refuse it."""
    version = schema_of(values)
    if version > SCHEMA_VERSION:
        raise UserError(
            f"thread {thread_id} was written by {written_by(version)}; this version reads state schema "
            f"{SCHEMA_VERSION} at most: decide it with the newer version (rolling back does not downgrade "
            "threads)"
        )


def upgrade_updates(run: Any, thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """The state updates that bring the thread (at its latest checkpoint, or at `checkpoint_id`) to
    this version's schema, to be written with the command's own update (empty when it already is);
    refuses a thread from a newer schema."""
    values = raw_values(run, thread_id, checkpoint_id)
    refuse_newer(thread_id, values)
    version = schema_of(values)
    updates: dict[str, Any] = {}
    while version < SCHEMA_VERSION:
        migration = MIGRATIONS.get(version)
        if migration is None:  # a gap in the registry: test_upgrade fails first; never guess here
            raise UserError(
                f"thread {thread_id} was written by {written_by(version)}, whose state this version "
                f"cannot read; decide it with that version, or start it again with 'market-analyst analyze'"
            )
        step = migration.apply({**values, **updates})
        updates.update(step)
        version = migration.source + 1
    return updates


def registry_problems(
    declared: frozenset[str],
    current: int = SCHEMA_VERSION,
    keys: dict[int, frozenset[str]] = STATE_KEYS,
    migrations: dict[int, Migration] = MIGRATIONS,
) -> list[str]:
    """What is missing for threads of every earlier schema to be read by this code: `declared` (the
    state's keys now) must be the newest schema's keys, and each schema's removed keys must be carried
    by its migration. Empty when complete; the tests hold it so."""
    problems = []
    if keys.get(current) != declared:
        added, gone = (
            sorted(declared - keys.get(current, frozenset())),
            sorted(keys.get(current, set()) - declared),
        )
        problems.append(
            f"AnalystState's keys differ from STATE_KEYS[{current}] (new: {added}, missing: {gone}): "
            "raise SCHEMA_VERSION, list the new keys and register a migration"
        )
    for version in range(1, current):
        migration = migrations.get(version)
        if migration is None or version + 1 not in keys or version not in keys:
            problems.append(f"no migration or key list from schema {version} to {version + 1}")
            continue
        uncarried = sorted(keys[version] - keys[version + 1] - set(migration.carries))
        if uncarried:
            problems.append(f"schema {version + 1} drops {uncarried} without a migration that carries them")
        strays = sorted(
            f"{old} -> {new}"
            for old, new in migration.carries.items()
            if new is not None and new not in keys[version + 1]
        )
        if strays:
            problems.append(
                f"schema {version}'s migration moves keys to keys schema {version + 1} lacks: {strays}"
            )
    return problems
