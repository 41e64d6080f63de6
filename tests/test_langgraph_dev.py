"""LangGraph's own development server: `langgraph dev`, as the README starts it, serves langgraph.json
on loopback, and the README's SDK and curl commands drive a run through it: the run stops at the gate
with its request, the decision publishes exactly one report, and a second resume of the same decision
publishes nothing. Decisions the rule refuses, sent through the SDK, record nothing."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from market_analyst.deps import open_archive, open_audit
from market_analyst.settings import Settings
from tests.support import REPO
from tests.support.cli import clean_environ
from tests.support.services import _die_with_parent, free_port

README_URL = "http://127.0.0.1:2024"
# LangChain's and LangSmith's own settings stay out: a developer's tracing key would send runs away.
_FOREIGN_VARS = ("LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_")


def _section_blocks() -> list[tuple[str, str]]:
    """The fenced blocks of the README's LangGraph server section: (language, text), in order."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## LangGraph server and Studio\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```(\w+)\n(.*?)^```$", section, re.M | re.S)


def _block(language: str, starts_with: str) -> str:
    [text] = [text for lang, text in _section_blocks() if lang == language and text.startswith(starts_with)]
    return text


def _against(text: str, url: str) -> str:
    """A README block with the URL `langgraph dev` printed there replaced by this server's."""
    assert text.count(README_URL) == 1, text
    return text.replace(README_URL, url)


@dataclass
class DevServer:
    """A `langgraph dev` process and the data directory its graph publishes into."""

    url: str
    data_dir: Path
    log: Path

    def client(self) -> SyncLangGraphClient:
        return get_sync_client(url=self.url)

    def settings(self) -> Settings:
        return Settings.load({"MA_DATA_DIR": str(self.data_dir)}, dotenv=None)

    def reports_of(self, thread: str) -> list[dict[str, Any]]:
        """The archived reports of `thread`, read through the archive itself."""
        archive = open_archive(self.settings())
        documents = [archive.get(key) for key in archive.keys()]
        return [d for d in documents if d is not None and d["thread_id"] == thread]

    def report_keys(self) -> list[str]:
        return open_archive(self.settings()).keys()

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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """The README's `langgraph dev` command on a free loopback port, with no reloading, in a directory
    holding the repository's langgraph.json and graphs/ (so neither a developer's `.env` nor the
    repository's `.langgraph_api/` plays a part), publishing into a data directory of its own."""
    home = tmp_path_factory.mktemp("langgraph-dev")
    shutil.copy(REPO / "langgraph.json", home / "langgraph.json")
    shutil.copytree(REPO / "graphs", home / "graphs")
    command = shlex.split(_block("bash", ".venv/bin/langgraph dev").split("#", 1)[0])
    assert command[0] == ".venv/bin/langgraph"
    command[0] = str(Path(sys.executable).parent / "langgraph")
    port = free_port()
    env = {k: v for k, v in clean_environ().items() if not k.startswith(_FOREIGN_VARS)} | {
        "MA_DATA_DIR": str(home / "data"),
        "MA_APPROVERS": "ann,bob",
        # What the CLI and server would otherwise try at start: usage analytics, a PyPI version check.
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
    }
    log = home / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*command, "--no-reload", "--host", "127.0.0.1", "--port", str(port)],
            cwd=home,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
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
        yield DevServer(url=url, data_dir=home / "data", log=log)
    finally:
        _stop(proc)


def _resume(client: SyncLangGraphClient, thread: str, decision: dict[str, Any]) -> Any:
    return client.runs.wait(thread, "analyst", command={"resume": decision})


def test_the_readme_sdk_calls_publish_one_report_and_a_second_resume_publishes_nothing(
    server: DevServer, capsys: pytest.CaptureFixture[str]
):
    code = _against(_block("python", "from langgraph_sdk import"), server.url)
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md (LangGraph server)", "exec"), namespace)
    thread, request, state = namespace["thread"], namespace["request"], namespace["state"]
    printed = capsys.readouterr().out.strip()

    # The request the gate asked with, as the SDK read it from the thread's state.
    assert request["kind"] == "approval_request" and request["thread_id"] == thread
    assert request["ticker"] == "NVDA" and request["revision"] == 1 and request["requested_by"] == "ann"
    assert request["allowed_actions"] == ["approve", "reject", "revise"]
    assert request["approvals"] == [] and request["approvals_needed"] == 1
    assert len(request["content_hash"]) == 64

    # Exactly one report, of this draft, approved through the server's door and not verified.
    [document] = server.reports_of(thread)
    assert printed == state["publication"]["key"] == document["key"]
    assert state["publication"]["created"] is True
    assert document["draft_id"] == request["draft_id"]
    assert document["content_hash"] == request["content_hash"]
    assert document["approved_by"] == "bob" and document["approval_note"] == "checked in Studio"
    assert document["approval_verified"] is False
    audit = server.audit_of(thread)
    assert [(e["action"], e["door"]) for e in audit] == [
        ("approved", "langgraph"),
        ("published", "langgraph"),
    ]

    # The same decision again: the finished thread runs nothing; the run succeeds with the final state.
    client = server.client()
    assert client.threads.get(thread)["status"] == "idle"
    history = client.threads.get_history(thread, limit=100)
    keys = server.report_keys()
    decision = namespace["decision"]
    again = _resume(client, thread, decision)
    assert again["publication"] == state["publication"]
    assert client.runs.list(thread)[0]["status"] == "success"
    assert client.threads.get_history(thread, limit=100) == history  # no new checkpoint
    assert server.report_keys() == keys and len(server.reports_of(thread)) == 1
    assert server.audit_of(thread) == audit


def test_the_readme_curl_commands_publish_one_report(server: DevServer):
    script = _against(_block("bash", "API="), server.url)
    keys = server.report_keys()
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    publication = json.loads(result.stdout)
    assert publication["created"] is True
    [new] = set(server.report_keys()) - set(keys)
    assert new == publication["key"]
    thread = publication["operation_id"].split(":", 1)[0]
    [document] = server.reports_of(thread)
    assert document["key"] == new and document["approved_by"] == "bob"


def test_refused_decisions_through_the_sdk_record_nothing_until_one_is_accepted(server: DevServer):
    client = server.client()
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "analyst", input={"ticker": "NVDA", "user_id": "ann"})
    first = client.threads.get_state(thread)["interrupts"][0]["value"]

    # A revision: a new draft, and the first one is stale from now on.
    _resume(
        client,
        thread,
        {
            "action": "revise",
            "draft_id": first["draft_id"],
            "by": "bob",
            "note": "for a cautious reader",
            "options": {"risk_tolerance": "conservative"},
        },
    )
    current = client.threads.get_state(thread)["interrupts"][0]["value"]
    assert current["revision"] == 2 and current["draft_id"] != first["draft_id"]
    audit = server.audit_of(thread)
    keys = server.report_keys()

    for decision, reason in (
        ({"action": "approve", "draft_id": first["draft_id"], "by": "bob"}, "is not the current draft"),
        ({"action": "approve", "draft_id": "0" * 24, "by": "bob"}, "is not the current draft"),
        ({"action": "approve", "draft_id": current["draft_id"], "by": "mallory"}, "MA_APPROVERS allows"),
        (
            {"action": "approve", "draft_id": current["draft_id"], "by": "bob", "content_hash": "f" * 64},
            "content hash",
        ),
    ):
        with pytest.raises(Exception, match=reason):
            _resume(client, thread, decision)
        # The run failed; the request still stands, and nothing was recorded or published.
        assert client.threads.get(thread)["status"] == "error"
        state = client.threads.get_state(thread)
        assert state["next"] == ["human_review"] and state["interrupts"][0]["value"] == current
        assert state["values"].get("approval") is None and state["values"].get("publication") is None
        assert server.audit_of(thread) == audit
        assert server.report_keys() == keys

    # A decision on the current draft still resumes it; a client's claim of verification is not believed.
    decision = {"action": "approve", "draft_id": current["draft_id"], "by": "bob", "verified": True}
    assert _resume(client, thread, decision)["publication"]["created"] is True
    [document] = server.reports_of(thread)
    assert document["draft_id"] == current["draft_id"] and document["approval_verified"] is False
    assert client.threads.get(thread)["status"] == "idle"
