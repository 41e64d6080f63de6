"""A thread forked at the gate waits there with the same draft, and approving it publishes that draft.

No node has run in a forked thread when it reaches the gate, so a decision recorded there without
naming the node it stands for was once taken as new input: the graph analysed again, made revision 2,
cleared the decision, and `approve` still printed "Published ...: archive key None"."""

from __future__ import annotations

import json

from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id


def _forked_at_gate(cli: Cli) -> tuple[str, str, dict]:
    source = unique_id("fork-src")
    original = cli.ok("analyze", "NVDA", "--thread-id", source, "--json").json()
    history = cli.ok("history", source, "--json").json()
    fork = unique_id("fork")
    view = cli.ok(
        "fork", source, "--checkpoint", history[-1]["checkpoint_id"], "--thread-id", fork, "--json"
    ).json()
    assert (
        view["status"] == "awaiting_approval" and view["draft"]["draft_id"] == original["draft"]["draft_id"]
    )
    return source, fork, original["draft"]


@both_backends
def test_approving_a_fork_made_at_the_gate_publishes_its_draft(cli: Cli) -> None:
    source, fork, draft = _forked_at_gate(cli)
    out = cli.ok("approve", fork)
    assert "archive key None" not in out.stdout
    view = cli.ok("status", fork, "--json").json()
    assert view["status"] == "published" and view["draft"]["revision"] == draft["revision"] == 1
    [document] = cli.archive_files()
    stored = json.loads(document.read_text())
    assert (stored["thread_id"], stored["key"]) == (fork, view["publication"]["key"])
    assert view["publication"]["key"] in out.stdout
    assert cli.ok("status", source, "--json").json()["status"] == "awaiting_approval"  # the original waits


@both_backends
def test_rejecting_a_fork_made_at_the_gate_ends_it(cli: Cli) -> None:
    _, fork, _ = _forked_at_gate(cli)
    out = cli.ok("reject", fork, "--reason", "not this one", "--json").json()
    assert out["status"] == "rejected" and out["draft"]["revision"] == 1
    assert cli.archive_files() == []
