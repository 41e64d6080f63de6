"""Revise re-analyses: options the built-in analyst can act on change the draft; free-text feedback
is recorded and said not to be acted on; and `revise` reports what changed. Both checkpointers."""

from __future__ import annotations

from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id


@both_backends
def test_revise_with_a_horizon_analyses_again_for_that_horizon(cli: Cli):
    thread = unique_id("revise-horizon")
    first = cli.ok("analyze", "NVDA", "--thread-id", thread, "--json").json()["draft"]
    assert "medium horizon" in first["framing"]
    revised = cli.ok("revise", thread, "--horizon", "long", "--json").json()
    draft = revised["draft"]
    assert "long horizon" in draft["framing"] and draft["framing"] != first["framing"]
    assert draft["draft_id"] != first["draft_id"] and draft["revision"] == 2
    assert draft["options"] == {"horizon": "long"}
    # No stored profile here: the draft says the horizon was chosen and the risk tolerance is the default.
    assert "- Chosen for this thread: horizon long" in draft["markdown"]
    statement = "moderate risk tolerance (the default) and long horizon (chosen for this thread)"
    assert statement in draft["markdown"]
    assert revised["options"] == {"horizon": "long"} and revised["revision"] == 2
    changes = revised["changes"]
    assert changes["confidence"] == [first["confidence"], draft["confidence"]]
    assert changes["lines_added"] >= 1 and changes["lines_removed"] >= 1
    # The stored profile is untouched: a new thread is analysed with the defaults again.
    assert "medium horizon" in cli.ok("analyze", "NVDA", "--json").json()["draft"]["framing"]


def test_free_text_feedback_is_recorded_and_said_not_to_be_acted_on(cli: Cli):
    thread = unique_id("revise-text")
    first = cli.ok("analyze", "NVDA", "--thread-id", thread, "--json").json()["draft"]
    text = cli.ok("revise", thread, "--feedback", "mention the 52-week high").stdout
    announced, _, text = text.partition("\n")
    assert announced == f"Deciding (revise) on revision 1 of thread {thread}, draft {first['draft_id']}"
    assert text.startswith(f"Revision 2 of thread {thread}")
    assert "Feedback: mention the 52-week high" in text and "Recommendation: BUY (unchanged)" in text
    draft = cli.ok("status", thread, "--json").json()["draft"]
    [note] = draft["feedback_notes"]
    assert note["acted"] is False and "built-in rules compute the same figures" in note["response"]
    assert "- mention the 52-week high (recorded, not acted on:" in draft["markdown"]
    assert "addressed" not in draft["markdown"] and "addressed" not in first["markdown"]
    # Same figures, same judgement: only the feedback section and the draft's identity changed.
    assert draft["summary"] == first["summary"] and draft["recommendation"] == first["recommendation"]


def test_revise_needs_something_to_act_on(cli: Cli):
    thread = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]
    refused = cli.fails("revise", thread)
    assert refused.returncode == 2 and "--feedback" in refused.stderr and "--horizon" in refused.stderr
    assert cli.ok("status", thread, "--json").json()["draft"]["revision"] == 1


def test_a_new_question_is_answered_by_the_next_draft(cli: Cli):
    thread = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]
    draft = cli.ok("revise", thread, "--question", "Is it a buy for a retiree?", "--json").json()["draft"]
    assert (
        draft["question"] == "Is it a buy for a retiree?"
        and "Is it a buy for a retiree?" in draft["markdown"]
    )
