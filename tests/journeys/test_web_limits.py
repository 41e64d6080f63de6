"""The sign-in limit against a real `market-analyst serve`, on PostgreSQL and on Redis: it bounds how
many wrong tokens are verified (a 401 is a token that was checked, a 429 one that was not), however
the guesses arrive, and a valid token from the same address still signs in at once."""

from __future__ import annotations

import secrets
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support.backends import both_backends
from tests.support.cli import Cli
from tests.support.web import FormClient, WebServer

LIMIT = 5  # wrong tokens verified per token ID, and per address group, in a minute (docs/inbox.md)


def _random_token() -> str:
    """A token of the right form whose ID is no approver's."""
    return f"{secrets.token_hex(6)}.{secrets.token_urlsafe(32)}"


def _guess(server: WebServer, token: str, source: str = "127.0.0.1") -> int:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=server.url, transport=transport, timeout=120) as client:
        return client.get("/api/threads", headers={"Authorization": f"Bearer {token}"}).status_code


def _valid_at_once(server: WebServer, token: str) -> None:
    started = time.monotonic()
    assert _guess(server, token) == 200
    assert FormClient(server).sign_in(token).status_code == 303
    assert time.monotonic() - started < 5


@both_backends
def test_fifty_failed_tokens_in_a_row_verify_five_and_never_hold_up_a_valid_one(cli: Cli, serve):
    token = cli.ok("approvers", "add", "gina").stdout.strip()
    server = serve(cli)
    codes = Counter(_guess(server, _random_token()) for _ in range(50))
    assert codes == {401: LIMIT, 429: 50 - LIMIT}
    limited = server.client(_random_token()).get("/api/threads")
    assert limited.status_code == 429 and 0 < int(limited.headers["retry-after"]) <= 61
    assert FormClient(server).sign_in(_random_token()).status_code == 429
    _valid_at_once(server, token)


@both_backends
def test_forty_concurrent_guesses_and_five_loopback_aliases_stay_within_the_limit(cli: Cli, serve):
    token = cli.ok("approvers", "add", "hugo").stdout.strip()
    other = cli.ok("approvers", "add", "iris").stdout.strip()
    server = serve(cli)
    with ThreadPoolExecutor(max_workers=40) as pool:
        codes = Counter(pool.map(lambda _: _guess(server, _random_token()), range(40)))
    assert codes[401] == LIMIT and codes[429] == 40 - LIMIT, codes
    _valid_at_once(server, token)

    # Wrong secrets for a real token's ID count against that ID, whatever address sends them.
    iris_id = other.split(".", 1)[0]
    with ThreadPoolExecutor(max_workers=40) as pool:
        wrong = [f"{iris_id}.{secrets.token_urlsafe(32)}" for _ in range(40)]
        codes = Counter(pool.map(lambda t: _guess(server, t), wrong))
    assert codes[401] == LIMIT and codes[429] == 40 - LIMIT, codes
    _valid_at_once(server, token)

    aliases = [f"127.0.0.{n}" for n in range(2, 7)]
    with ThreadPoolExecutor(max_workers=25) as pool:
        codes = Counter(pool.map(lambda n: _guess(server, _random_token(), aliases[n % 5]), range(50)))
    assert codes[401] == 0 and codes[429] == 50, codes  # 127.0.0.0/24 used its five above
    _valid_at_once(server, token)


def test_five_loopback_aliases_share_one_allowance(cli: Cli, serve):
    token = cli.ok("approvers", "add", "jill").stdout.strip()
    server = serve(cli)
    aliases = [f"127.0.0.{n}" for n in range(2, 7)]
    with ThreadPoolExecutor(max_workers=25) as pool:
        codes = Counter(pool.map(lambda n: _guess(server, _random_token(), aliases[n % 5]), range(50)))
    assert codes == {401: LIMIT, 429: 50 - LIMIT}
    for alias in aliases:
        assert _guess(server, token, alias) == 200


def test_the_limit_is_shared_by_every_server_process(cli: Cli, serve):
    cli.ok("approvers", "add", "kurt")
    first, second = serve(cli), serve(cli)
    codes = Counter(_guess(first if n % 2 else second, _random_token()) for n in range(20))
    assert codes == {401: LIMIT, 429: 20 - LIMIT}


def test_guesses_spread_over_many_addresses_stay_within_the_host_wide_cap(cli: Cli, serve):
    token = cli.ok("approvers", "add", "lars").stdout.strip()
    # A trusted proxy on 127.0.0.2 names the client: twelve address groups, six guesses each.
    server = serve(cli, "--trusted-proxy", "127.0.0.2")
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=server.url, transport=transport, timeout=120) as proxy:

        def guess(n: int) -> int:
            headers = {"Authorization": f"Bearer {_random_token()}", "X-Forwarded-For": f"198.51.{n % 12}.9"}
            return proxy.get("/api/threads", headers=headers).status_code

        with ThreadPoolExecutor(max_workers=24) as pool:
            codes = Counter(pool.map(guess, range(72)))
        assert codes == {401: 50, 429: 22}, codes  # five per group would be sixty
        assert proxy.get("/api/threads", headers={"Authorization": f"Bearer {token}"}).status_code == 200
