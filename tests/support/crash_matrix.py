"""The crash matrix: every kill point, in every durability mode, recovered with the real CLI.

`run_case` kills one run at one point, recovers it the way an operator would (`status`, then
`analyze` again if the thread is unknown, `resume` while it can go on, `approve` at the gate), and
reports what the crash cost: whether the run had to start again, which nodes ran twice, whether the
approval survived, and whether the archive holds exactly one document equal to an uncrashed run's.
`expected_loss` states what each mode is allowed to lose; the tests assert it and the
durability table of docs/durability.md is printed from it (`python -m tests.crash_matrix`).
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from market_analyst.graph import NODES
from tests.support.crashkit import Harness
from tests.support.retry import retry_while_busy

ANALYZE_NODES = NODES[: NODES.index("draft_report") + 1]
GATE = "human_review"
# `before:human_review` falls in `analyze` (as the gate first asks); `before:human_review#1` in
# `approve` (as the gate starts again with the decision, which LangGraph saved before it runs).
KILL_POINTS = tuple(f"{when}:{node}" for node in NODES for when in ("before", "after")) + (
    f"before:{GATE}#1",
    "after-archive-write",
)
# The gate runs twice in an uncrashed run: once to ask, once more when the decision resumes it.
NORMAL_RUNS = {GATE: 2}
MODES = ("sync", "async", "exit")
# A killed command's Redis lease expires after MA_LEASE_TTL_SECONDS; the crash tests set it short.
LEASE_TTL_SECONDS = "2"
TICKER = "NVDA"
FIXED_CLOCK = "1739577600"  # 2025-02-15T00:00:00Z, so approval times match the uncrashed run


@dataclass
class CaseReport:
    """What one killed run cost."""

    kill_point: str
    killed: bool = False
    status_after_kill: str = ""  # the thread's status as `status` reported it, or "unknown"
    started_again: bool = False
    reran: list[str] = field(default_factory=list)
    recovery: list[str] = field(default_factory=list)  # the commands the recovery needed
    said: list[str] = field(default_factory=list)  # where each of them said the thread stood next
    documents: int = 0
    identical: bool = False
    finished_in: float = 0.0  # a random kill that never landed: how long the run it missed took

    @property
    def approval_kept(self) -> bool:
        """A kill after the approval was recorded never needs a second `approve`."""
        return self.status_after_kill != "approved_pending_publish" or "approve" not in self.recovery


def _phase(kill_point: str) -> str:
    """Which command a kill point falls in: `analyze` or `approve` (the gate returns only once a
    decision resumed it)."""
    node = kill_point.partition(":")[2]
    if kill_point == "after-archive-write" or node in ("record_decision", "publish", f"{GATE}#1"):
        return "approve"
    if kill_point == f"after:{GATE}":
        return "approve"
    return "analyze"


def reference_run(h: Harness, env: dict[str, str], thread_id: str) -> tuple[bytes, float]:
    """The archive document of an uncrashed run with the same inputs, in `env`'s own store, and how
    many seconds its analyze and approve took (random kills are timed against it)."""
    first = h.run(["analyze", TICKER, "--thread-id", thread_id, "--user", "ann"], env).check()
    second = h.run(["approve", thread_id, "--user", "bob"], env).check()
    [path] = sorted((Path(env["MA_DATA_DIR"]) / "reports").glob("*.json"))
    return path.read_bytes(), first.seconds + second.seconds


@dataclass(frozen=True)
class Reference:
    """One uncrashed run's document, and how long its analyze and approve took.

    The document depends on the thread only through its ID (the `thread_id` and `operation_id`
    fields, and the key the archive derives from the operation ID), so one run serves every case:
    `for_thread` gives the document an uncrashed run of another thread writes. A test holds it to a
    real run of another thread (`test_crash_recovery`), byte for byte."""

    thread_id: str
    document: bytes
    seconds: float

    def for_thread(self, thread_id: str) -> bytes:
        from market_analyst.persistence.archive.document import operation_key, render_document

        document = json.loads(self.document)
        assert document["thread_id"] == self.thread_id, document["thread_id"]
        draft = document["operation_id"].removeprefix(f"{self.thread_id}:")
        assert draft != document["operation_id"], document["operation_id"]
        document |= {"thread_id": thread_id, "operation_id": f"{thread_id}:{draft}"}
        document["key"] = operation_key(document["ticker"], document["as_of"], document["operation_id"])
        rendered = render_document(document)
        if thread_id != self.thread_id:
            assert self.thread_id.encode() not in rendered, "the thread ID is in more fields than these"
        return rendered


def reference(h: Harness, env: dict[str, str], thread_id: str) -> Reference:
    """The uncrashed run every case of a test session is compared with (see `Reference`)."""
    document, seconds = reference_run(h, env, thread_id)
    return Reference(thread_id, document, seconds)


def _status(h: Harness, env: dict[str, str], thread_id: str) -> str:
    status = h.run(["status", thread_id, "--json"], env)
    if status.returncode != 0:
        assert "unknown thread" in status.stderr, status.stderr
        return "unknown"
    return str(status.json()["status"])


def _recover(h: Harness, env: dict[str, str], thread_id: str, report: CaseReport, ran: Counter[str]) -> None:
    """Bring the thread to publication as an operator would, with the real CLI: each command's
    `--json` output says where the thread stands next."""
    state = report.status_after_kill
    for _ in range(6):
        if state == "published":
            return
        if state == "unknown":
            report.started_again = True
            step = ["analyze", TICKER, "--thread-id", thread_id, "--user", "ann"]
        elif state in ("in_progress", "approved_pending_publish"):
            step = ["resume", thread_id]
        elif state == "awaiting_approval":
            step = ["approve", thread_id, "--user", "bob"]
        else:
            raise AssertionError(f"thread {thread_id} ended as {state}, not published")
        # On Redis the killed command's lease outlives it until its TTL runs out.
        outcome = retry_while_busy(lambda step=step: h.run([*step, "--json"], env)).check()
        report.recovery.append(step[0])
        ran.update(outcome.nodes)
        state = outcome.json()["status"]
        report.said.append(f"{step[0]}: {state} (next: {outcome.json().get('next')})")
    raise AssertionError(f"thread {thread_id} did not reach publication: {report.recovery}")


def run_case(h: Harness, env: dict[str, str], thread_id: str, kill_point: str, expected: bytes) -> CaseReport:
    """Kill one run at `kill_point`, recover it with the CLI, and report the cost.

    Fixed kill points fall in `analyze` or in `approve`; a random one (`at:SECONDS`) is measured
    from the start of `analyze` and, if that finishes first, carries on into `approve`."""
    report = CaseReport(kill_point=kill_point)
    ran: Counter[str] = Counter()
    analyze = ["analyze", TICKER, "--thread-id", thread_id, "--user", "ann"]
    approve = ["approve", thread_id, "--user", "bob"]
    if kill_point.startswith("at:"):
        delay = float(kill_point[3:])
        first = h.run(analyze, env, kill_point)
        ran.update(first.nodes)
        report.killed = first.killed
        if not first.killed:
            second = h.run(approve, env, f"at:{max(0.0, delay - first.check().seconds):.3f}")
            ran.update(second.nodes)
            report.killed = second.killed
            if not second.killed:
                report.finished_in = first.seconds + second.check().seconds
    else:
        if _phase(kill_point) == "approve":
            ran.update(h.run(analyze, env).check().nodes)
        outcome = h.run(analyze if _phase(kill_point) == "analyze" else approve, env, kill_point)
        ran.update(outcome.nodes)
        report.killed = outcome.killed
    report.status_after_kill = _status(h, env, thread_id)
    _recover(h, env, thread_id, report, ran)
    report.reran = sorted(node for node, count in ran.items() if count > NORMAL_RUNS.get(node, 1))
    documents = sorted((Path(env["MA_DATA_DIR"]) / "reports").glob("*.json"))
    report.documents = len(documents)
    report.identical = len(documents) == 1 and documents[0].read_bytes() == expected
    return report


@dataclass(frozen=True)
class Allowed:
    """What a kill may cost: whether the run may or must start again, and which nodes may re-run."""

    start_again: frozenset[bool]
    must_rerun: frozenset[str]
    may_rerun: frozenset[str]

    def admits(self, report: CaseReport) -> bool:
        reran = set(report.reran)
        return report.started_again in self.start_again and self.must_rerun <= reran <= self.may_rerun


def expected_loss(mode: str, kill_point: str) -> Allowed:
    """What a kill at `kill_point` may cost in `mode`.

    sync: only the node killed mid-way re-runs (`after:X` kills X after its work, before LangGraph
    saved its writes); a kill in `publish` after the archive write re-runs `publish`, which finds
    its document and writes nothing. exit: a run killed before the gate has no checkpoint at all and
    starts again, so every node that had finished runs again. async: checkpoints are written in the
    background while later nodes run, so a kill can land before any number of them were saved: the
    run resumes from whichever was (or starts again if none was) and re-runs what followed it.
    After approval every mode behaves like sync: a decision is always written at once."""
    when, _, node = kill_point.partition(":")
    node = node.partition("#")[0]
    if kill_point == "after-archive-write":
        when, node = "after", "publish"
    killed_mid = frozenset({node} if when == "after" else set())
    if _phase(kill_point) == "approve":
        return Allowed(frozenset({False}), killed_mid, killed_mid)
    index = NODES.index(node)
    finished = frozenset(NODES[: index + (1 if when == "after" else 0)])
    if mode == "exit":
        return Allowed(frozenset({True}), finished, finished)
    if mode == "async":
        return Allowed(frozenset({False, True}), killed_mid, finished)
    return Allowed(frozenset({False}), killed_mid, killed_mid)


def random_kill_points(seed: int, count: int, duration: float) -> list[str]:
    """`count` reproducible kill times spread over a run that takes `duration` seconds."""
    rng = random.Random(seed)
    return [f"at:{rng.uniform(0.0, duration):.3f}" for _ in range(count)]


def durability_table() -> str:
    """docs/durability.md's table of what each mode may lose, as the crash tests assert it."""
    rows = [
        "| mode | killed before the gate (during `analyze`) | killed after approval (during `approve`) |",
        "|---|---|---|",
    ]
    words = {
        "sync": "resumes from the last node that finished; only the node killed mid-way runs again",
        "async": "resumes from the last checkpoint that reached the store, or starts again if none did; "
        "any node that finished after it runs again",
        "exit": "nothing was saved: the thread is unknown and the run starts again; every node runs again",
    }
    for mode in MODES:
        for kp in KILL_POINTS:  # the words must agree with what the tests assert
            allowed = expected_loss(mode, kp)
            if _phase(kp) == "analyze":
                assert (True in allowed.start_again) == (mode != "sync")
            else:
                assert allowed.start_again == frozenset({False})
        rows.append(
            f"| `{mode}` | {words[mode]} | resumes to publication without a second approval (a decision "
            "is written at once in every mode); only the node killed mid-way runs again, and `publish` "
            "finds its document |"
        )
    return "\n".join(rows)


def record(report: CaseReport, backend: str, mode: str) -> None:
    """Append the case to `$CRASH_REPORT_FILE` (JSON lines) when it is set, for `summarize`."""
    target = os.environ.get("CRASH_REPORT_FILE")
    if target:
        row = {"backend": backend, "mode": mode, "phase": _phase_of(report.kill_point), **asdict(report)}
        with open(target, "a") as handle:
            handle.write(json.dumps(row) + "\n")


def _phase_of(kill_point: str) -> str:
    return "random" if kill_point.startswith("at:") else _phase(kill_point)


def summarize(path: str) -> str:
    """A Markdown table of what the recorded cases lost, by backend, mode and phase."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["backend"], row["mode"], row["phase"]), []).append(row)
    out = [
        "| backend | mode | killed during | cases | recovered, one identical document | started again "
        "| nodes that ran twice (cases) | second approval needed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (backend, mode, phase), cases in sorted(groups.items()):
        reran = Counter(node for case in cases for node in case["reran"])
        reran_text = ", ".join(f"{n} ({reran[n]})" for n in NODES if reran[n]) or "none"
        good = sum(1 for c in cases if c["documents"] == 1 and c["identical"])
        again = sum(1 for c in cases if c["started_again"])
        second = sum(
            1
            for c in cases
            if c["status_after_kill"] == "approved_pending_publish" and "approve" in c["recovery"]
        )
        out.append(
            f"| {backend} | `{mode}` | {phase} | {len(cases)} | {good} | {again} | {reran_text} | {second} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "summarize":
        print(summarize(sys.argv[2]))
    else:
        print(durability_table())
