"""The embedded profile store under commands that write and read it at once, round after round:
`profile set` and `analyze` together, then the same with `serve` running and `/healthz` polled.

Each command makes the store's files owner-only after it closes the store, while the next command
already holds it and is writing (Qdrant Edge writes through temporary files it then renames). A walk
that stopped on a file that vanished under it once ended `profile set` and `analyze` with exit 1
(the latter with its thread left at `load_profile`) and made `/healthz` answer 500."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx

from tests.support.cli import Cli, unique_id
from tests.support.crashkit import Harness, Outcome
from tests.support.web import WebServer

ROUNDS = 5
TOLERANCES = ("conservative", "moderate", "aggressive")


def _round(cli: Cli, harness: Harness, k: int) -> tuple[list[Outcome], list[str]]:
    """Six `profile set` (three users, two each) and two `analyze` started at once."""
    threads = [unique_id(f"race{k}") for _ in range(2)]
    jobs = [
        (["profile", "set", "--user", f"user-{i % 3}", "--risk-tolerance", TOLERANCES[(k + i) % 3]], cli.env)
        for i in range(6)
    ] + [
        (["analyze", "NVDA", "--user", f"user-{i}", "--thread-id", t], cli.env) for i, t in enumerate(threads)
    ]
    return harness.run_together(jobs, cwd=cli.cwd), threads


def _check_round(cli: Cli, outcomes: list[Outcome], threads: list[str]) -> None:
    for outcome in outcomes:
        assert outcome.returncode == 0, f"exit {outcome.returncode}: {outcome.stderr.strip()[-600:]}"
    for thread in threads:
        view = cli.ok("status", thread, "--json").json()
        assert view["status"] == "awaiting_approval", view["next"]


def _rounds(cli: Cli, harness: Harness, between: Callable[[], None] = lambda: None) -> None:
    for k in range(ROUNDS):
        outcomes, threads = _round(cli, harness, k)
        _check_round(cli, outcomes, threads)
        between()
    for user in ("user-0", "user-1", "user-2"):  # every profile survived, whole
        shown = cli.ok("profile", "show", "--user", user, "--json").json()
        assert shown["profile"]["risk_tolerance"] in TOLERANCES


def test_concurrent_sets_and_analyses_all_succeed(cli: Cli, harness: Harness) -> None:
    cli.ok("profile", "set", "--user", "user-0", "--notes", "first")
    _rounds(cli, harness)


def test_concurrent_sets_and_analyses_with_serve_polled(
    cli: Cli, harness: Harness, serve: Callable[..., WebServer]
) -> None:
    cli.ok("profile", "set", "--user", "user-0", "--notes", "first")
    server = serve(cli)
    answers: list[int] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while not stop.is_set():
                answers.append(client.get("/healthz").status_code)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        _rounds(cli, harness)
    finally:
        stop.set()
        poller.join()
    assert answers and set(answers) <= {200}, sorted(set(answers))
