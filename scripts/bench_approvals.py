"""Approval bench: one approval through a warm `market-analyst serve` (the JSON API over one
keep-alive connection) against the CLI's process-per-command `market-analyst approve`, side by side.

Both publish the same kind of draft on the embedded PostgreSQL of a scratch data directory, with
`durability="sync"`; each approval takes the thread's lease, records the decision, runs `publish`
(an fsynced archive write) and checkpoints. What differs is what surrounds it: the server has its
imports done and its process running; the CLI pays for an interpreter, imports and a new
connection on every command.
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from market_analyst.persistence.postgres.embedded import discard_embedded_postgres
from market_analyst.settings import Settings
from market_analyst.workflow import start_analysis
from market_analyst.workflow.approvers import add_approver

MA = Path(sys.executable).with_name("market-analyst")


def _environment(data_dir: Path) -> dict[str, str]:
    """This process's environment with the bench's own store: embedded PostgreSQL, sync writes."""
    chosen = {"MA_DATA_DIR": str(data_dir), "MA_CHECKPOINTER": "postgres", "MA_DURABILITY": "sync"}
    cleared = {"POSTGRES_URL": "", "MA_APPROVERS": "", "MA_ANALYST": "rules", "SOURCE_DATE_EPOCH": ""}
    return dict(os.environ) | cleared | chosen


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    with open(log, "ab") as out:
        server = subprocess.Popen(
            [str(MA), "serve", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url + "/healthz", timeout=5)
            return server, url
        except httpx.TransportError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise SystemExit(f"the server did not start: {log.read_text()[-1000:]}") from None
            time.sleep(0.1)


def _summary(label: str, times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    p50, p99 = statistics.median(ordered), ordered[math.ceil(len(ordered) * 0.99) - 1]
    print(f"  {label:<44} p50 {p50 * 1000:8.1f} ms   p99 {p99 * 1000:8.1f} ms   ({len(times)} approvals)")
    return p50, p99


def _web_approvals(url: str, token: str, threads: list[tuple[str, str]]) -> list[float]:
    times = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as api:
        api.get("/api/threads").raise_for_status()  # warm: the token verified once, the store opened once
        for thread, draft_id in threads:
            started = time.perf_counter()
            response = api.post(f"/api/threads/{thread}/approve", json={"draft_id": draft_id})
            times.append(time.perf_counter() - started)
            assert response.status_code == 200 and response.json()["status"] == "published", response.text
    return times


def _cli_approvals(env: dict[str, str], threads: list[str]) -> list[float]:
    times = []
    for thread in threads:
        started = time.perf_counter()
        done = subprocess.run([str(MA), "approve", thread, "--user", "bench"], env=env, capture_output=True)
        times.append(time.perf_counter() - started)
        assert done.returncode == 0, done.stderr.decode()
    return times


WARM_P50_TARGET = 0.050  # seconds: a warm server's approval
WARM_RATIO_TARGET = 25.0  # the warm server against a CLI process, at p50
MEMORIES_RATIO_TARGET = 1.2  # a CLI `approve --note` for a user with memories against one without
HOLD = (  # holds the memory store's folder, as an erasure or a `reindex` does, until its stdin closes
    "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
    "print('held', flush=True); sys.stdin.read()"
)


def _timed(env: dict[str, str], *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(MA), *args], env=env, capture_output=True)
    took = time.perf_counter() - started
    assert done.returncode == 0, done.stderr.decode()
    return took


def run_notes(n: int) -> bool:
    """`approve --note` in a process each: for a user with 1,000 memories against one with none, and
    with the memory store held by another process (the memory waits, the decision does not); and
    `remember`. True when the user with memories is within MEMORIES_RATIO_TARGET."""
    import bench_memory_analyze

    each = f"{n} CLI process{'' if n == 1 else 'es'} each"
    print(f"approve --note: {each}, a user with 1,000 memories, one without, a held store")
    with tempfile.TemporaryDirectory(prefix="bench-notes-") as tmp:
        data = Path(tmp) / "data"
        env = _environment(data)
        settings = Settings.load(environ=env, dotenv=None)
        bench_memory_analyze.seed(data, 1_000)
        heavy = [start_analysis(settings, "NVDA", user=bench_memory_analyze.USER).thread_id for _ in range(n)]
        light = [start_analysis(settings, "NVDA", user="newcomer").thread_id for _ in range(n)]
        held = [start_analysis(settings, "NVDA", user="newcomer").thread_id for _ in range(n)]
        times: dict[str, list[float]] = {"with": [], "without": [], "held": [], "remember": []}
        for i, (a, b) in enumerate(zip(heavy, light, strict=True)):  # alternated, side by side
            times["with"].append(
                _timed(env, "approve", a, "--user", "bench", "--note", f"note {i} on margins")
            )
            times["without"].append(
                _timed(env, "approve", b, "--user", "bench", "--note", f"note {i} on margins")
            )
            times["remember"].append(
                _timed(env, "remember", f"keep cash above {i} percent", "--user", "newcomer")
            )
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(data / ".memories.session.lock")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            for i, thread in enumerate(held):
                times["held"].append(_timed(env, "approve", thread, "--user", "bench", "--note", f"held {i}"))
        finally:
            holder.communicate("", timeout=30)
        _timed(env, "memories", "sync")
        discard_embedded_postgres(settings.postgres_dir)
    with_p50 = _summary("approve --note, a user with 1,000 memories", times["with"])[0]
    without_p50 = _summary("approve --note, a user with none", times["without"])[0]
    held_p50 = _summary("approve --note, the memory store held", times["held"])[0]
    _summary("remember (a process each)", times["remember"])
    ratio = with_p50 / without_p50
    met = ratio <= MEMORIES_RATIO_TARGET
    print(
        f"  ratio at p50: with memories {ratio:.2f}x without (target <= {MEMORIES_RATIO_TARGET}x: "
        f"{'met' if met else 'MISSED'}); a held store {held_p50 / without_p50:.2f}x a free one"
    )
    return met


def run(n: int) -> bool:
    """Draft 2n threads, approve n through the server and n with the CLI, and print both; True when
    the warm server's p50 is under WARM_P50_TARGET and WARM_RATIO_TARGET times the CLI's."""
    processes = f"{n} CLI process{'' if n == 1 else 'es'}"
    print(f"approvals: {n} through a warm server vs {processes}, embedded PostgreSQL, sync")
    with tempfile.TemporaryDirectory(prefix="bench-approvals-") as tmp:
        env = _environment(Path(tmp) / "data")
        settings = Settings.load(environ=env, dotenv=None)
        token = add_approver(settings, "bench")
        started = time.perf_counter()
        drafted = [start_analysis(settings, "NVDA", thread_id=f"web-{i}") for i in range(n)]
        web = [(view.thread_id, str((view.draft or {})["draft_id"])) for view in drafted]
        cli = [start_analysis(settings, "NVDA", thread_id=f"cli-{i}").thread_id for i in range(n)]
        print(f"  drafted {2 * n} threads in {time.perf_counter() - started:.1f} s")
        server, url = _start_server(env, Path(tmp) / "serve.log")
        try:
            web_p50, _ = _summary(
                "POST /api/threads/{id}/approve (warm server)", _web_approvals(url, token, web)
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
        cli_p50, _ = _summary("market-analyst approve (a process each)", _cli_approvals(env, cli))
        discard_embedded_postgres(settings.postgres_dir)
    ratio = cli_p50 / web_p50
    met = web_p50 < WARM_P50_TARGET and ratio >= WARM_RATIO_TARGET
    print(
        f"  ratio at p50: the warm server approves {ratio:.1f}x faster (targets: p50 under "
        f"{WARM_P50_TARGET * 1000:.0f} ms and at least {WARM_RATIO_TARGET:.0f}x: "
        f"{'met' if met else 'MISSED'})"
    )
    return met
