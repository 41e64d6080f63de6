"""Replica bench: approvals through two `market-analyst serve` replicas against one, side by side.

Both runs use the same set-up: checkpoints and records (`MA_RECORDS=postgres`: approvers, sessions,
the audit log and the report archive) on one PostgreSQL server (the embedded binary, reached by its
address as replicas on other hosts would be), each replica with a data directory of its own,
`durability="sync"`.
Eight clients approve different threads at once, over keep-alive connections; with two replicas,
half of them talk to each. What is measured is approvals a second and the latency of each; on a
machine with few cores the replicas share them with the database, so two need not beat one.
"""

from __future__ import annotations

import base64
import math
import os
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from bench_approvals import _environment, _start_server

from market_analyst.deps import open_archive
from market_analyst.persistence.postgres.embedded import discard_embedded_postgres, embedded_postgres_uri
from market_analyst.settings import Settings
from market_analyst.workflow import start_analysis
from market_analyst.workflow.approvers import add_approver

CLIENTS = 8


def _approve_all(urls: list[str], token: str, threads: list[tuple[str, str]]) -> tuple[float, list[float]]:
    """Approve `threads` with CLIENTS clients at once, client i on replica i mod len(urls): the wall
    time and each approval's latency."""
    shares = [threads[i::CLIENTS] for i in range(CLIENTS)]

    def client(i: int) -> list[float]:
        times = []
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=urls[i % len(urls)], headers=headers, timeout=120) as api:
            api.get("/api/threads").raise_for_status()  # warm: token verified, connection open
            for thread, draft_id in shares[i]:
                started = time.perf_counter()
                response = api.post(f"/api/threads/{thread}/approve", json={"draft_id": draft_id})
                times.append(time.perf_counter() - started)
                assert response.status_code == 200, response.text
        return times

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        latencies = [t for times in pool.map(client, range(CLIENTS)) for t in times]
    return time.perf_counter() - started, latencies


def _line(label: str, wall: float, times: list[float]) -> float:
    ordered = sorted(times)
    p50, p99 = statistics.median(ordered), ordered[math.ceil(len(ordered) * 0.99) - 1]
    rate = len(times) / wall
    print(f"  {label:<28} {rate:6.1f} approvals/s   p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms")
    return rate


def run(n: int) -> None:
    """Draft 2n threads; approve n through one replica and n through two, CLIENTS clients at once."""
    print(f"replicas: {n} approvals through one replica vs {n} through two, {CLIENTS} clients at once")
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        root = Path(tmp)
        base = _environment(root / "data")
        uri = embedded_postgres_uri(Settings.load(environ=base, dotenv=None).postgres_dir)
        try:
            master = base64.b64encode(os.urandom(32)).decode()  # the one every replica shares
            env = base | {"POSTGRES_URL": uri, "MA_RECORDS": "postgres", "MA_MASTER_KEY": master}
            settings = Settings.load(environ=env, dotenv=None)
            token = add_approver(settings, "bench")
            started = time.perf_counter()
            views = [start_analysis(settings, "NVDA", thread_id=f"r-{i}") for i in range(2 * n)]
            threads = [(v.thread_id, str((v.draft or {})["draft_id"])) for v in views]
            print(f"  drafted {2 * n} threads in {time.perf_counter() - started:.1f} s")
            servers: list[subprocess.Popen[bytes]] = []
            try:
                urls = []
                for name in ("host-1", "host-2"):
                    server, url = _start_server(env | {"MA_DATA_DIR": str(root / name)}, root / f"{name}.log")
                    servers.append(server)
                    urls.append(url)
                one = _line("one replica", *_approve_all(urls[:1], token, threads[:n]))
                two = _line("two replicas", *_approve_all(urls, token, threads[n:]))
            finally:
                for server in servers:
                    server.terminate()
                    server.wait(timeout=30)
            published = len(open_archive(settings).list().reports)
            assert published == 2 * n, f"{published} reports for {2 * n} approvals"
        finally:  # stopped and deleted even when a step fails
            discard_embedded_postgres(Settings.load(environ=base, dotenv=None).postgres_dir)
    print(f"  ratio: two replicas approve {two / one:.2f}x as many a second as one")
