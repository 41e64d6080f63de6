"""What a real `market-analyst serve` does with requests an attacker shapes: bodies too big to read,
clients too slow to wait for, credentials that are not text, Host names it does not serve, and
forwarding headers from proxies it does or does not trust. Raw sockets where a client library would
tidy the request up."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from pathlib import Path

import httpx

from tests.support.cli import Cli
from tests.support.web import CSRF_FIELD, FormClient, WebServer

SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "x-frame-options", "cache-control")
MB = 1024 * 1024


def _rss(server: WebServer) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _connect(server: WebServer, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", server.port))
    sock.settimeout(30)
    return sock


def _send_big_body(server: WebServer, headers: str, chunked: bool) -> tuple[bytes, int]:
    """Send a 300 MB body after `headers`; what the server answered and how much it took in."""
    sock = _connect(server)
    sock.sendall(headers.encode() + b"\r\n")
    answer, sent = b"", 0

    def read() -> None:
        nonlocal answer
        with contextlib.suppress(OSError):
            answer = sock.recv(65536)

    reader = threading.Thread(target=read)
    reader.start()
    chunk = b"x" * MB
    with contextlib.suppress(OSError):
        while sent < 300 * MB:
            sock.sendall(b"100000\r\n" + chunk + b"\r\n" if chunked else chunk)
            sent += MB
    reader.join(timeout=30)
    sock.close()
    return answer, sent


def test_a_300_mb_body_without_a_token_is_refused_before_it_is_read(cli: Cli, serve):
    cli.ok("approvers", "add", "lena")
    server = serve(cli)
    server.client().get("/healthz")  # the stores are warm: what grows from here is the body's
    before = _rss(server)
    head = (
        f"POST /api/threads/x/approve HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Content-Type: application/json\r\n"
    )
    for _ in range(3):
        answer, sent = _send_big_body(server, head + f"Content-Length: {300 * MB}\r\n", chunked=False)
        assert answer.startswith(b"HTTP/1.1 413 ") and b"content-security-policy" in answer.lower(), answer
        assert sent < 300 * MB  # the connection was closed, not drained
        answer, sent = _send_big_body(server, head + "Transfer-Encoding: chunked\r\n", chunked=True)
        assert answer.startswith(b"HTTP/1.1 413 "), answer
        assert sent < 300 * MB
    grown = _rss(server) - before
    print(f"server RSS grew by {grown / MB:.1f} MB over six 300 MB bodies")
    assert grown < 20 * MB, grown
    assert server.client().get("/healthz").status_code == 200
    assert server.proc is not None and server.proc.poll() is None


def test_slow_header_and_slow_body_clients_are_dropped_after_the_timeout(cli: Cli, serve):
    token = cli.ok("approvers", "add", "mona").stdout.strip()
    server = serve(cli, env={"MA_REQUEST_TIMEOUT": "2"})
    slow = []
    for n in range(40):
        sock = _connect(server)
        if n % 2:  # headers that never end
            sock.sendall(b"GET /inbox HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        else:  # a body that never arrives whole
            sock.sendall(
                f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Length: 1000\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n\r\ntoken=".encode()
            )
        slow.append(sock)
    started = time.monotonic()
    dropped: set[int] = set()
    while len(dropped) < len(slow) and time.monotonic() - started < 10:
        for n, sock in enumerate(slow):
            if n in dropped:
                continue
            try:
                sock.sendall(b"X-A: b\r\n" if n % 2 else b"a")  # a byte now and then keeps it busy
                sock.settimeout(0.01)
                if sock.recv(1024) == b"":
                    dropped.add(n)
            except TimeoutError:
                pass
            except OSError:
                dropped.add(n)
        # A well-behaved client is served meanwhile.
        assert server.client(token).get("/api/threads").status_code == 200
        time.sleep(0.3)
    elapsed = time.monotonic() - started
    assert len(dropped) == 40 and elapsed < 6, (len(dropped), elapsed)
    assert elapsed > 1.5  # not before the timeout
    for sock in slow:
        sock.close()
    assert "did not arrive within 2 s" in server.log.read_text()


def test_credentials_that_are_not_ascii_get_401_with_headers_and_one_log_line(cli: Cli, serve):
    token = cli.ok("approvers", "add", "nina").stdout.strip()
    server = serve(cli)
    odd = "Bearer t\u00f6k\u00e9n.\u00ff".encode("latin-1")
    for n, value in enumerate((odd, "Bearer ééé".encode(), b"Bearer \xff\xfe." + b"a" * 60)):
        response = httpx.get(f"{server.url}/api/threads?odd={n}", headers={"Authorization": value})
        assert response.status_code == 401, response.text
        assert all(h in response.headers for h in SECURITY_HEADERS)

    browser = FormClient(server)
    assert browser.sign_in("tökén\u202e").status_code == 401
    login = browser.http.post("/login?odd=csrf", data={"token": token, "csrf_token": "é\u00ff"})
    assert login.status_code == 401 and all(h in login.headers for h in SECURITY_HEADERS)
    browser.sign_in(token)
    posted = browser.http.post("/logout?odd=form", data={"csrf_token": "ü" * 43})
    assert posted.status_code == 401 and all(h in posted.headers for h in SECURITY_HEADERS)
    # An ASCII token that is merely wrong is still the CSRF refusal it always was.
    assert browser.http.post("/logout", data={"csrf_token": "a" * 43}).status_code == 403
    thief = server.client()
    thief.headers["cookie"] = "ma_session=s.\u00e9\u00e9"
    stranger = thief.get("/inbox?odd=cookie")
    assert stranger.status_code == 303 and all(h in stranger.headers for h in SECURITY_HEADERS)

    # Each of them counted as a failure of this address: four so far, one left, then 429.
    assert (
        httpx.get(server.url + "/api/threads", headers={"Authorization": b"Bearer \xe9"}).status_code == 401
    )
    assert (
        httpx.get(server.url + "/api/threads", headers={"Authorization": b"Bearer \xe9"}).status_code == 429
    )
    assert server.client(token).get("/api/threads").status_code == 200  # the valid token is not held up

    time.sleep(0.5)
    log = server.log.read_text()
    assert "Traceback" not in log and " 500" not in log
    for marker in ("odd=0", "odd=1", "odd=2", "odd=csrf", "odd=form", "odd=cookie"):
        path = "/login" if marker == "odd=csrf" else "/logout" if marker == "odd=form" else ""
        lines = [line for line in log.splitlines() if f"{path}?{marker}" in line or marker in line]
        assert len(lines) == 1, (marker, lines)
        assert "refused" in lines[0] or "303" in lines[0]


def test_only_the_host_names_it_serves_are_answered_and_no_location_comes_from_a_host(cli: Cli, serve):
    token = cli.ok("approvers", "add", "olga").stdout.strip()
    server = serve(cli, "--allowed-host", "inbox.example", env={"MA_ALLOWED_HOSTS": "other.example"})
    for path in ("/inbox/", "/inbox", "/", "/login", "/api/threads", "/healthz", "/static/style.css"):
        response = httpx.get(server.url + path, headers={"Host": "evil.example"})
        assert response.status_code == 400, (path, response.status_code)
        assert "location" not in response.headers
        assert all(h in response.headers for h in SECURITY_HEADERS)
    slash = httpx.get(server.url + "/inbox/")
    assert slash.status_code == 404 and "location" not in slash.headers  # no redirect built from Host
    for host in ("inbox.example", "other.example:8443", "localhost", f"127.0.0.1:{server.port}"):
        assert httpx.get(server.url + "/login", headers={"Host": host}).status_code == 200, host
        home = httpx.get(server.url + "/", headers={"Host": host})
        assert home.headers["location"] == "/inbox"
    api = httpx.get(
        server.url + "/api/threads", headers={"Host": "inbox.example", "Authorization": f"Bearer {token}"}
    )
    assert api.status_code == 200
    assert "is not a host name" in cli.fails("serve", "--allowed-host", "bad/name").stderr
    assert "is not an IP address" in cli.fails("serve", "--trusted-proxy", "nowhere").stderr


def _login_page(server: WebServer, source: str, **headers: str) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=server.url, transport=transport) as client:
        return client.get("/login", headers=headers)


def test_behind_a_trusted_tls_proxy_the_cookie_is_secure_and_hsts_is_sent(cli: Cli, serve):
    token = cli.ok("approvers", "add", "pia").stdout.strip()
    server = serve(cli, "--behind-proxy", "--trusted-proxy", "127.0.0.2")
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}

    trusted = _login_page(server, "127.0.0.2", **forwarded)
    cookie = trusted.headers["set-cookie"]
    assert cookie.startswith("__Host-ma_session=")
    assert "; secure" in cookie.lower() and "path=/" in cookie.lower()
    assert "domain" not in cookie.lower()
    assert trusted.headers["strict-transport-security"].startswith("max-age=")

    # Sign in through the "proxy": the cookie name and flags stay those of HTTPS.
    with httpx.Client(base_url=server.url, transport=httpx.HTTPTransport(local_address="127.0.0.2")) as proxy:
        nonce = cookie.split(";", 1)[0].split("=", 1)[1]
        csrf = CSRF_FIELD.search(trusted.text)
        assert csrf
        signed = proxy.post(
            "/login",
            data={"token": token, "csrf_token": csrf.group(1)},
            headers=forwarded | {"Cookie": f"__Host-ma_session={nonce}"},
        )
        assert signed.status_code == 303 and signed.headers["location"] == "/inbox"
        session = signed.headers["set-cookie"]
        assert session.startswith("__Host-ma_session=s.") and "; secure" in session.lower()
        value = session.split(";", 1)[0].split("=", 1)[1]
        inbox = proxy.get("/inbox", headers=forwarded | {"Cookie": f"__Host-ma_session={value}"})
        assert inbox.status_code == 200 and "pia" in inbox.text
    sessions = cli.ok("approvers", "sessions", "pia", "--json").json()["sessions"]
    assert [s["client"] for s in sessions] == ["203.0.113.7"]  # the client the proxy named

    for source in ("127.0.0.1", "127.0.0.3"):  # not the proxy: its forwarding headers mean nothing
        untrusted = _login_page(server, source, **forwarded)
        cookie = untrusted.headers["set-cookie"]
        assert cookie.startswith("ma_session=") and "secure" not in cookie.lower()
        assert "strict-transport-security" not in untrusted.headers


def test_a_trusted_proxy_names_the_client_the_limit_counts(cli: Cli, serve):
    cli.ok("approvers", "add", "quin")
    server = serve(cli, "--trusted-proxy", "127.0.0.2")
    wrong = {"Authorization": "Bearer " + "ab" * 6 + "." + "x" * 43}

    def guess(source: str, client: str) -> int:
        transport = httpx.HTTPTransport(local_address=source)
        with httpx.Client(base_url=server.url, transport=transport) as http:
            return http.get("/api/threads", headers=wrong | {"X-Forwarded-For": client}).status_code

    assert [guess("127.0.0.2", "203.0.113.7") for _ in range(6)] == [401] * 5 + [429]
    assert guess("127.0.0.2", "198.51.100.1") == 401  # another client behind the same proxy
    # From an untrusted peer the header is ignored: the peer's own address is counted.
    assert guess("127.0.0.1", "198.51.100.99") == 401


def test_every_text_field_has_a_limit(cli: Cli, serve):
    token = cli.ok("approvers", "add", "rhea").stdout.strip()
    long = "x" * 2001
    assert (
        "--question is 2001 characters; at most 2000"
        in cli.fails("analyze", "NVDA", "--question", long).stderr
    )
    thread = "limits-" + token[:8]
    cli.ok("analyze", "NVDA", "--thread-id", thread, "--question", "x" * 2000)
    assert "at most 2000" in cli.fails("revise", thread, "--question", long).stderr
    server = serve(cli)
    api = server.client(token)
    draft_id = api.get(f"/api/threads/{thread}").json()["request"]["draft_id"]
    for action, field in (("approve", "note"), ("reject", "reason"), ("revise", "feedback")):
        refused = api.post(f"/api/threads/{thread}/{action}", json={field: long, "draft_id": draft_id})
        assert refused.status_code == 422 and field in refused.json()["detail"], refused.text
    browser = FormClient(server)
    browser.sign_in(token)
    form = browser.submit(f"/threads/{thread}", f"/threads/{thread}/revise", feedback=long)
    assert form.status_code == 422 and "at most 2000" in form.text
    huge = browser.submit(f"/threads/{thread}", f"/threads/{thread}/revise", feedback="y" * 70_000)
    assert huge.status_code == 413
    assert cli.ok("status", thread, "--json").json()["draft"]["revision"] == 1


def test_an_unexpected_error_is_a_500_with_the_headers_one_log_line_and_no_traceback(cli: Cli, serve):
    token = cli.ok("approvers", "add", "sara").stdout.strip()
    server = serve(cli)
    browser = FormClient(server)
    browser.sign_in(token)
    (cli.data_dir / "approvers.json").write_text("{not json")  # damaged while the server runs
    for client, path in (
        (server.client(token), "/api/threads?broken=api"),
        (browser.http, "/inbox?broken=page"),
    ):
        response = client.get(path)
        assert response.status_code == 500, response.text
        assert all(h in response.headers for h in SECURITY_HEADERS)
        assert "Traceback" not in response.text and "approvers.json" not in response.text
    time.sleep(0.5)
    log = server.log.read_text()
    assert "Traceback" not in log
    for marker in ("broken=api", "broken=page"):
        [line] = [line for line in log.splitlines() if marker in line]
        refused = r" 500 \d+ ms refused: internal error UserError: cannot read the approvers file"
        assert re.search(refused, line), line
