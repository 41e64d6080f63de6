"""Notification bench: how fast workers deliver events to a local receiver, with one worker and with
two, and what writing an event beside each decision adds to an approval through a warm server.

Throughput: a worker (a `market-analyst worker` process) is started and waited for, then `n` events,
each of a thread of its own, are written to the outbox at once, and the time until the receiver has
taken every one of them is measured; then the same with two workers. The receiver answers 200 and
counts IDs (it does not verify signatures: its own cost is not the workers').

Approval cost: two warm `serve`s on scratch data directories, one with a webhook configured (its
worker running, as in production) and one without, approve the same kind of draft alternately;
p50 side by side. The target: at most 1.1x.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import bench_approvals

from market_analyst.deps import open_events
from market_analyst.persistence.postgres.embedded import discard_embedded_postgres
from market_analyst.ports import Event
from market_analyst.settings import Settings
from market_analyst.workflow import start_analysis
from market_analyst.workflow.approvers import add_approver

MA = Path(sys.executable).with_name("market-analyst")
SECRET = "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
APPROVAL_RATIO_TARGET = 1.1


class Counter:
    """A receiver on loopback that answers 200 and keeps the IDs it was sent."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.lock = threading.Lock()
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                with counter.lock:
                    counter.ids.add(self.headers.get("webhook-id", ""))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, prefix: str) -> int:
        with self.lock:
            return sum(1 for i in self.ids if i.startswith(prefix))

    def wait(self, prefix: str, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count(prefix) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"the workers delivered {self.count(prefix)} of {n} events in {timeout} s")
            time.sleep(0.02)


def _event(batch: str, n: int) -> Event:
    return Event(
        event_id=f"evt_bench_{batch}_{n:06d}",
        kind="requested",
        at="2026-01-01T00:00:00+00:00",
        thread_id=f"bench-{batch}-{n}",
        ticker="NVDA",
        draft_id="d" * 24,
        content_hash="0" * 64,
        revision=1,
        by="bench",
    )


def throughput(n: int) -> None:
    """Events a second to a local receiver, with one worker and with two."""
    print(f"notifications: {n:,} events to a local receiver, one worker and two")
    receiver = Counter()
    with tempfile.TemporaryDirectory(prefix="bench-notify-") as tmp:
        env = bench_approvals._environment(Path(tmp) / "data") | {
            "MA_WEBHOOK_URL": receiver.url,
            "MA_WEBHOOK_SECRET": SECRET,
        }
        settings = Settings.load(environ=env, dotenv=None)
        outbox = open_events(settings)
        try:
            for workers in (1, 2):
                procs = [
                    subprocess.Popen(
                        [str(MA), "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                    )
                    for _ in range(workers)
                ]
                try:
                    outbox.put(_event(f"warm{workers}", 0))  # every worker running before the clock starts
                    receiver.wait(f"evt_bench_warm{workers}_", 1, timeout=120)
                    time.sleep(min(2.0, n / 100))  # the other worker up too (a short run skips most of it)
                    batch = f"w{workers}"
                    started = time.perf_counter()
                    for i in range(n):
                        outbox.put(_event(batch, i))
                    receiver.wait(f"evt_bench_{batch}_", n, timeout=600)
                    took = time.perf_counter() - started
                finally:
                    for proc in procs:
                        proc.terminate()
                    for proc in procs:
                        proc.wait(30)
                label = "one worker " if workers == 1 else "two workers"
                print(
                    f"  {label}  {n / took:8.1f} events/s   ({n:,} events in {took:.2f} s, written included)"
                )
        finally:
            discard_embedded_postgres(settings.postgres_dir)


def approval_cost(n: int) -> bool:
    """A warm server's approval with events written (and its worker running) against without."""
    print(f"  an approval through a warm server with a webhook configured and without ({n} each)")
    receiver = Counter()
    times: dict[str, list[float]] = {"with": [], "without": []}
    with tempfile.TemporaryDirectory(prefix="bench-notify-cost-") as tmp:
        places = {"with": Path(tmp) / "with", "without": Path(tmp) / "without"}
        envs = {
            "with": bench_approvals._environment(places["with"])
            | {"MA_WEBHOOK_URL": receiver.url, "MA_WEBHOOK_SECRET": SECRET},
            "without": bench_approvals._environment(places["without"]),
        }
        servers = {}
        try:
            threads: dict[str, list[tuple[str, str]]] = {}
            tokens = {}
            for side, env in envs.items():
                settings = Settings.load(environ=env, dotenv=None)
                tokens[side] = add_approver(settings, "bench")
                views = [start_analysis(settings, "NVDA", user="ann") for _ in range(n)]
                threads[side] = [(v.thread_id, (v.request or {})["draft_id"]) for v in views]
                servers[side] = bench_approvals._start_server(env, Path(tmp) / f"{side}.log")
            for i in range(n):  # alternated, side by side
                for side in ("without", "with"):
                    _, url = servers[side]
                    times[side] += bench_approvals._web_approvals(url, tokens[side], [threads[side][i]])
        finally:
            for server, _ in servers.values():
                server.terminate()
                server.wait(30)
            for place in places.values():
                discard_embedded_postgres(place / "postgres")
    with_p50, _ = bench_approvals._summary("approve, events written (worker running)", times["with"])
    without_p50, _ = bench_approvals._summary("approve, no notifications", times["without"])
    ratio = with_p50 / without_p50
    met = ratio <= APPROVAL_RATIO_TARGET
    print(f"  ratio at p50: {ratio:.3f}x (target <= {APPROVAL_RATIO_TARGET}x: {'met' if met else 'MISSED'})")
    return met


def run(n: int, approvals: int) -> bool:
    throughput(n)
    return approval_cost(approvals)


if __name__ == "__main__":
    os.environ.setdefault("MA_ANALYST", "rules")
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 200, 20)
