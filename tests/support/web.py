"""The web server as the tests meet it: a real `market-analyst serve` process on a free loopback port,
and an HTTP client that signs in and posts forms the way a browser does."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.cli import market_analyst_command
from tests.support.crashkit import Forked, Harness, die_with_parent
from tests.support.services import free_port, kill_process, release_port, stop_process

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')
HIDDEN_FIELD = re.compile(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"')
DRAFT_FIELDS = ("draft_id", "content_hash")


@dataclass
class WebServer:
    """`market-analyst serve` in its own process: forked from `harness` when one is given (as the
    harness forks every CLI command, a fraction of a second instead of a new interpreter's imports),
    else the installed script; or `command`, which gets `serve --port N` appended."""

    env: dict[str, str]
    cwd: Path
    log: Path
    command: list[str] | None = None
    harness: Harness | None = None
    port: int = 0
    proc: subprocess.Popen[bytes] | Forked | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *args: str, timeout: float = 60) -> WebServer:
        self.port = free_port()
        argv = ["serve", "--port", str(self.port), *args]
        if self.command is None and self.harness is not None:
            self.proc = self.harness.serve(argv, self.env, self.cwd, self.log)
        else:
            self._popen([*(self.command or market_analyst_command()), *argv])
        deadline = time.monotonic() + timeout
        while True:
            try:
                httpx.get(self.url + "/static/style.css", timeout=1)
                return self
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(
                        f"the server did not start: {self.log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)

    def _popen(self, command: list[str]) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def client(self, token: str | None = None) -> httpx.Client:
        """A client of this server; with `token`, it sends it as a bearer token."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120)

    def stop(self) -> None:
        stop_process(self.proc)
        release_port(self.port)

    def kill(self) -> None:
        kill_process(self.proc)


class FormClient:
    """A browser without script: keeps the session cookie and sends each form's CSRF token."""

    def __init__(self, server: WebServer) -> None:
        self.http = server.client()

    def csrf(self, path: str) -> str:
        match = CSRF_FIELD.search(self.http.get(path).text)
        assert match, f"no CSRF token on {path}"
        return match.group(1)

    def sign_in(self, token: str) -> httpx.Response:
        return self.http.post("/login", data={"token": token, "csrf_token": self.csrf("/login")})

    def submit(self, form_page: str, action: str, **fields: str) -> httpx.Response:
        """Post a form found on `form_page` as a browser would: with that page's CSRF token and the
        draft its decision forms name (their hidden fields), unless `fields` gives them."""
        text = self.http.get(form_page).text
        match = CSRF_FIELD.search(text)
        assert match, f"no CSRF token on {form_page}"
        hidden = {name: value for name, value in HIDDEN_FIELD.findall(text) if name in DRAFT_FIELDS}
        return self.http.post(action, data={"csrf_token": match.group(1), **hidden, **fields})

    def page(self, path: str) -> httpx.Response:
        return self.http.get(path)
