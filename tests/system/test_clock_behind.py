"""A host whose clock is behind the one that drafted: `approve` run under `faketime` (Debian's package,
which moves the clock of one real process) on a thread drafted at the real time. LangGraph names
checkpoints by the writer's clock, and the savers read a thread's latest checkpoint as the one whose
name sorts last, so such an approval once published its report, then read the thread as waiting at
the gate ("in progress") and exited 1. The savers now carry the order forward (see
`persistence/checkpoints/order.py`): the approval publishes once, exits 0, and the thread reads
published, its decision dated no earlier than its draft. On both checkpointers."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime
from uuid import UUID

import pytest

from market_analyst.errors import UserError
from market_analyst.settings import Settings
from market_analyst.workflow.graph_run import open_run
from market_analyst.workflow.views import config_for
from tests.support.backends import both_backends
from tests.support.cli import Cli, market_analyst_command

pytestmark = pytest.mark.skipif(
    shutil.which("faketime") is None, reason="needs faketime (Debian's package; .ci/run installs it)"
)


def _at(cli: Cli, offset: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`market-analyst ARGS` in a new process whose clock reads `offset` from the real one."""
    return subprocess.run(
        ["faketime", "-f", offset, *market_analyst_command(), *args],
        cwd=cli.cwd,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def _published_once(cli: Cli, thread: str) -> dict:
    status = cli.ok("status", thread, "--json").json()
    assert status["status"] == "published" and status["next"] == [], status["status"]
    assert [p.name for p in cli.archive_files()] == [status["publication"]["key"] + ".json"]
    for approval in status["approvals"]:  # never dated before the draft it approves
        assert datetime.fromisoformat(approval["at"]) >= datetime.fromisoformat(status["drafted_at"])
    actions = [e["action"] for e in cli.ok("audit", "list", "--thread", thread, "--json").json()]
    assert actions.count("published") == 1
    assert cli.ok("threads", "--pending").stdout.count(thread) == 0
    return status


@both_backends
def test_an_approval_on_a_host_two_hours_behind_publishes_once_and_reads_published(cli: Cli):
    thread = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]
    approved = _at(cli, "-2h", "approve", thread)
    assert approved.returncode == 0, approved.stderr
    assert "Published thread" in approved.stdout and approved.stderr.count("\n") <= 1
    status = _published_once(cli, thread)
    assert status["approval"]["at"] == status["drafted_at"]  # the clock read two hours earlier
    again = cli.run("approve", thread)  # a second approval publishes nothing more
    assert again.returncode != 0 and len(cli.archive_files()) == 1


@both_backends
def test_a_revision_at_the_real_time_then_approvals_an_hour_and_two_hours_behind(cli: Cli):
    """A quorum of two whose approvers' hosts disagree: the revision is drafted at the real time, the
    first approval comes from a host an hour behind, the second from one two hours behind."""
    cli.env["MA_REQUIRED_APPROVALS"] = "2"
    thread = cli.ok("analyze", "NVDA", "--user", "ann", "--json").json()["thread_id"]
    cli.ok("revise", thread, "--feedback", "say more about the drawdown")
    first = _at(cli, "-1h", "approve", thread, "--user", "amy")
    assert first.returncode == 0, first.stderr
    waiting = cli.ok("status", thread, "--json").json()
    assert waiting["status"] == "awaiting_approval", waiting["status"]
    assert [a["by"] for a in waiting["request"]["approvals"]] == ["amy"]  # the approval is not hidden
    assert thread in cli.ok("threads", "--pending").stdout
    second = _at(cli, "-2h", "approve", thread, "--user", "ben")
    assert second.returncode == 0, second.stderr
    status = _published_once(cli, thread)
    assert [a["by"] for a in status["approvals"]] == ["amy", "ben"]
    assert status["draft"]["revision"] == 2


def _uuid6_before(checkpoint_id: str, seconds: int) -> str:
    """A checkpoint ID as LangGraph makes one, `seconds` before the one given."""
    parent = UUID(checkpoint_id).int
    ticks = ((parent >> 80) & 0xFFFFFFFFFFFF) << 12 | (parent >> 64) & 0x0FFF
    ticks -= seconds * 10_000_000
    number = ((ticks >> 12) & 0xFFFFFFFFFFFF) << 80 | (0x6000 | ticks & 0x0FFF) << 64 | 0x8000 << 48 | 0x1234
    return str(UUID(int=number))


@both_backends
def test_a_checkpoint_that_would_sort_before_its_parent_is_refused_and_nothing_of_it_is_written(cli: Cli):
    """The savers' last line: a write whose ID sorts before its parent's (a clock stepped back between
    the read that set the order and the write) is refused in one line, and the thread stays as it was."""
    thread = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]
    settings = Settings.load(cli.env, dotenv=None)
    with open_run(settings, thread) as run:
        saver = run.backend.saver
        latest = saver.get_tuple(config_for(thread))
        before = len(list(saver.list(config_for(thread))))
        behind = {**latest.checkpoint, "id": _uuid6_before(latest.checkpoint["id"], 7200)}
        with pytest.raises(UserError) as refused:
            saver.put(latest.config, behind, latest.metadata, {})
        assert f"clock is 2:00:00 behind the last step of thread {thread}" in str(refused.value)
        assert "\n" not in str(refused.value)
        assert len(list(saver.list(config_for(thread)))) == before
        assert saver.get_tuple(config_for(thread)).checkpoint["id"] == latest.checkpoint["id"]
    assert cli.ok("status", thread, "--json").json()["status"] == "awaiting_approval"
    cli.ok("approve", thread)
    assert json.loads(cli.ok("status", thread, "--json").stdout)["status"] == "published"
