"""Crash: a decision's memory is written exactly once, and only for a decision that is recorded.

Each case starts a thread for ann, then kills `approve`, `revise` or `reject` with SIGKILL (a real
process, forked by tests/support/crashkit.py) at a point drawn from a seeded generator: as a node
starts or returns, right after the memory reached the store, right after the archive write, or at a
random moment. The operator then does what the thread's status calls for (`resume` while it can go
on; the same decision again if it was lost). Afterwards every decision the audit log records has
exactly one memory with the ID its source gives, no decision memory exists without a recorded
decision, and a published report is remembered exactly once.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from market_analyst.nodes.record_decision import MEMORY_KINDS
from market_analyst.state import memory_id
from tests.support.cli import clean_environ
from tests.support.crashkit import Harness
from tests.support.retry import retry_while_busy
from tests.support.services import new_database

CASES = 20
SEED = 20251201
MEMORY_WRITE = "call:after:market_analyst.persistence.memory.edge:EdgeMemoryStore.write"
# Between the decision (recorded in the thread, its memory in the thread's outbox) and the memory
# store: before the copy, and after it but before the outbox is marked copied.
BETWEEN = [
    "call:before:market_analyst.persistence.memory.edge:EdgeMemoryStore.write",
    MEMORY_WRITE,
    "call:before:market_analyst.persistence.checkpoints.thread_index:PostgresThreadIndex.release_memories",
]
TEXT = {"approve": "fine, but watch supplier concentration", "revise": "say more about the drawdown",
        "reject": "figures are stale"}  # fmt: skip
DECISION_KINDS = set(MEMORY_KINDS.values())
POINTS = {
    "approve": ["before:human_review", "after:human_review", "before:record_decision", *BETWEEN,
                "after:record_decision", "before:publish", "after-archive-write", "after:publish"],
    "revise": ["before:human_review", "after:human_review", "before:record_decision", *BETWEEN,
               "after:record_decision", "before:analyze", "after:draft_report"],
    "reject": ["before:human_review", "after:human_review", "before:record_decision", *BETWEEN,
               "after:record_decision"],
}  # fmt: skip


def _decision(action: str, thread: str) -> list[str]:
    option = {"approve": "--note", "revise": "--feedback", "reject": "--reason"}[action]
    return [action, thread, "--user", "rev", option, TEXT[action], "--json"]


def plan(seed: int, count: int) -> list[tuple[str, str]]:
    """(action, kill point) per case: the actions in turn, a node boundary or a random moment."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        action = ("approve", "revise", "reject")[i % 3]
        point = rng.choice(POINTS[action]) if rng.random() < 0.6 else f"at:{rng.uniform(0.05, 1.5):.3f}"
        cases.append((action, point))
    return cases


def _status(h: Harness, env: dict[str, str], thread: str) -> dict:
    return h.run(["status", thread, "--json"], env).check().json()


def run_case(h: Harness, env: dict[str, str], action: str, kill_point: str) -> dict:
    """Kill one decision, recover as an operator would, and return what the stores hold."""
    thread = h.run(["analyze", "NVDA", "--user", "ann", "--json"], env).check().json()["thread_id"]
    decided = h.run(_decision(action, thread), env, kill_point)
    killed = (
        decided.killed
        or f"exited {decided.returncode}: {decided.stdout[-300:]} {decided.stderr.strip()[-500:]}"
    )
    view = _status(h, env, thread)
    for _ in range(4):
        if view["status"] in ("in_progress", "approved_pending_publish"):
            view = retry_while_busy(lambda: h.run(["resume", thread, "--json"], env)).check().json()
        elif view["status"] == "awaiting_approval" and view["draft"]["revision"] == 1:
            view = retry_while_busy(lambda: h.run(_decision(action, thread), env)).check().json()
        else:
            break
    # What waited for the memory store goes in with the next command that opens it, or with this.
    retry_while_busy(lambda: h.run(["memories", "sync"], env)).check()
    audit = h.run(["audit", "list", "--thread", thread, "--json"], env).check().json()
    memories = h.run(["memories", "list", "--user", "ann", "--all", "--json"], env).check().json()
    return {"thread": thread, "killed": killed, "view": view, "audit": audit, "memories": memories}


def check(case: dict, action: str) -> None:
    """Every recorded decision has exactly one memory; no memory without a recorded decision."""
    thread, audit, memories = case["thread"], case["audit"], case["memories"]
    kinds = {"approved": "approval_note", "revised": "feedback", "rejected": "rejection"}
    decisions = [e for e in audit if e["action"] in kinds]
    expected = {memory_id(kinds[e["action"]], thread, e["draft_id"], e["actor"]) for e in decisions}
    remembered = [m for m in memories if m["kind"] in DECISION_KINDS]
    assert len(remembered) == len({m["id"] for m in remembered}) == len(expected), (decisions, remembered)
    assert {m["id"] for m in remembered} == expected
    [decision] = decisions  # the decision made once, recorded once, whatever the kill
    assert decision["action"] == {"approve": "approved", "revise": "revised", "reject": "rejected"}[action]
    [memory] = remembered
    assert memory["text"] == TEXT[action] and memory["thread_id"] == thread and memory["said_by"] == "rev"
    reports = [m for m in memories if m["kind"] == "report"]
    published = [e for e in audit if e["action"] == "published"]
    assert len(reports) == len(published) == (1 if action == "approve" else 0)
    if reports:
        assert reports[0]["archive_key"] == published[0]["archive_key"]


def test_killed_decisions_leave_exactly_one_memory_each(tmp_path: Path, postgres_server: str):
    killed = CASES - len(_run_plan(tmp_path, postgres_server, plan(SEED, CASES)))
    assert killed >= CASES // 2, f"only {killed} of {CASES} runs were killed: the plan misses the commands"


def test_a_kill_between_the_decision_and_its_memory_leaves_exactly_one(tmp_path: Path, postgres_server: str):
    """20 decisions, each killed after it was recorded and before its memory was known to be in the
    store: every one ends with exactly one memory."""
    actions = ("approve", "revise", "reject")
    cases = [(actions[i % 3], BETWEEN[(i // 3) % 3]) for i in range(CASES)]
    assert _run_plan(tmp_path, postgres_server, cases) == []  # every one was killed there


def _run_plan(tmp_path: Path, postgres_server: str, cases: list[tuple[str, str]]) -> list[str]:
    """Run each (action, kill point) case on a store of its own, check it, and return the decisions
    that were not killed, each with how it ended."""
    harnesses = [Harness(tmp_path / f"h{i}") for i in range(3)]
    for h in harnesses:
        h.workdir.mkdir()

    def one(index: int) -> tuple[str, dict]:
        action, point = cases[index]
        env = clean_environ() | {
            "MA_DATA_DIR": str(tmp_path / f"case-{index}"),
            "POSTGRES_URL": new_database(postgres_server, prefix="memcrash_"),
        }
        return action, run_case(harnesses[index % len(harnesses)], env, action, point)

    with ThreadPoolExecutor(max_workers=len(harnesses)) as pool:
        results = list(pool.map(one, range(len(cases))))
    for (action, point), (_, case) in zip(cases, results, strict=True):
        try:
            check(case, action)
        except AssertionError as exc:
            raise AssertionError(f"{action} killed at {point}: {exc}") from exc
    return [
        f"{action} at {point}: {case['killed']}"
        for (action, point), (_, case) in zip(cases, results, strict=True)
        if case["killed"] is not True
    ]
