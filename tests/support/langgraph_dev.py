"""LangGraph's own development server, as docs/langgraph-server.md starts it (`langgraph dev`), on the
repository's langgraph.json, graphs/ and auth handler, in a directory of its own (so neither a
developer's `.env` nor the repository's `.langgraph_api/` plays a part), publishing into a data
directory of its own; with callers made by `market-analyst approvers add`, one token each."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from market_analyst.deps import open_archive, open_audit
from market_analyst.settings import Settings
from market_analyst.workflow.approvers import add_approver
from tests.support import REPO
from tests.support.cli import clean_environ, market_analyst_command
from tests.support.crashkit import die_with_parent
from tests.support.services import embedded_servers_since, free_port

PAGE_URL = "http://127.0.0.1:2024"
# LangChain's and LangSmith's own settings stay out: a developer's tracing key would send runs away.
_FOREIGN_VARS = ("LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_")


def section_blocks() -> list[tuple[str, str]]:
    """The fenced blocks of docs/langgraph-server.md: (language, text), in order."""
    page = (REPO / "docs" / "langgraph-server.md").read_text()
    return re.findall(r"^```(\w+)\n(.*?)^```$", page, re.M | re.S)


def block(language: str, starts_with: str) -> str:
    [text] = [text for lang, text in section_blocks() if lang == language and text.startswith(starts_with)]
    return text


@dataclass
class DevServer:
    """A `langgraph dev` process, the environment its graph reads, and its callers' tokens."""

    url: str
    env: dict[str, str]
    log: Path
    tokens: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        """Stop the server as an operator does (SIGTERM): it shuts down cleanly."""
        assert self.proc is not None
        _stop(self.proc)

    def kill(self) -> None:
        """`kill -9` of the server's process group (the server, and nothing it started apart)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def client(self, name: str | None = None) -> SyncLangGraphClient:
        """An SDK client signed in as `name` (None: no token at all)."""
        headers = {"Authorization": f"Bearer {self.tokens[name]}"} if name else None
        return get_sync_client(url=self.url, headers=headers)

    def settings(self) -> Settings:
        return Settings.load(self.env, dotenv=None)

    def reports_of(self, thread: str) -> list[dict[str, Any]]:
        """The archived reports of `thread`, read through the archive itself (either backend)."""
        archive: Any = open_archive(self.settings())
        documents = [archive.get(key) for key in archive.keys()]
        return [d for d in documents if d is not None and d["thread_id"] == thread]

    def report_keys(self) -> list[str]:
        archive: Any = open_archive(self.settings())
        return sorted(archive.keys())

    def audit_of(self, thread: str) -> list[dict[str, Any]]:
        return open_audit(self.settings()).entries(thread)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, SIGKILL it after ten seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def add_caller(env: dict[str, str], name: str, role: str) -> str:
    """`market-analyst approvers add NAME --role ROLE`, as an operator runs it: the token it prints."""
    done = subprocess.run(
        [*market_analyst_command(), "approvers", "add", name, "--role", role],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@contextmanager
def dev_server(
    home: Path,
    env: dict[str, str],
    callers: dict[str, str],
    prepare: Callable[[], None] | None = None,
    *,
    made_by_cli: bool = True,
    tokens: dict[str, str] | None = None,
) -> Iterator[DevServer]:
    """The page's `langgraph dev` command on a free loopback port, with no reloading, in `home`,
    with the environment `env` and the callers `callers` (name: role) added first: by the page's
    `approvers add`, or (`made_by_cli=False`) by the function it runs, without a process each; or,
    to start it again in the same `home`, the `tokens` of the callers added before. The embedded
    PostgreSQL servers started for data directories in `home` are stopped as it ends."""
    shutil.copy(REPO / "langgraph.json", home / "langgraph.json")
    shutil.copytree(REPO / "graphs", home / "graphs", dirs_exist_ok=True)
    command = shlex.split(block("bash", ".venv/bin/langgraph dev").split("#", 1)[0])
    assert command[0] == ".venv/bin/langgraph"
    command[0] = str(Path(sys.executable).parent / "langgraph")
    port = free_port()
    full_env = (
        {k: v for k, v in clean_environ().items() if not k.startswith(_FOREIGN_VARS)}
        | env
        | {
            # What the CLI and server would otherwise try at start: usage analytics, a PyPI version check.
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "true",
        }
    )
    started = embedded_servers_since()
    if tokens is not None:
        pass
    elif made_by_cli:
        tokens = {name: add_caller(full_env, name, role) for name, role in callers.items()}
    else:
        settings = Settings.load(full_env, dotenv=None)
        tokens = {name: add_approver(settings, name, role) for name, role in callers.items()}
    log = home / "server.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*command, "--no-reload", "--host", "127.0.0.1", "--port", str(port)],
            cwd=home,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            # A server that exited is not ours to talk to, whatever answers on the port.
            assert proc.poll() is None, f"langgraph dev exited: {log.read_text()[-3000:]}"
            try:
                if httpx.get(url + "/ok", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"langgraph dev did not start: {log.read_text()[-3000:]}"
            time.sleep(0.1)
        yield DevServer(url=url, env=full_env, log=log, tokens=tokens, proc=proc)
    finally:
        _stop(proc)
        started(inside=home)


def status_of(call: Callable[[], Any]) -> int:
    """The HTTP status a refused SDK call answered with (the call must be refused)."""
    try:
        call()
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    raise AssertionError("the call was not refused")
