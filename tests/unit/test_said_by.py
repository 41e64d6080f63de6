"""How `forget --including-said-by` takes a person's words out of a value: every form a store keeps
them in, nothing shorter taken from inside other words, a second pass that changes nothing, an
untouched value returned as the very object, and a sealed decision sealed again (so a state writer
still cannot make one, and the redacted one still proves who decided)."""

from __future__ import annotations

import secrets

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Interrupt

from market_analyst.decisions import Decision, DecisionSeal, content_hash
from market_analyst.rendering import plain
from market_analyst.workflow.said_by import REDACTED, Words, _walk, resealer


def _plainly(old: dict, new: dict) -> dict:
    return new


def test_every_form_of_the_words_goes_and_nothing_else():
    words = Words.of("ann", ["Mind the *margin* squeeze", "ok"])
    text = f"Feedback: {plain('Mind the *margin* squeeze')} (addressed). Bob said it looks ok to him."
    assert words.out_of(text) == f"Feedback: {REDACTED} (addressed). Bob said it looks ok to him."
    assert words.out_of("ok", whole=True) == REDACTED  # a short note goes only where it is hers whole
    assert words.out_of("ok") == "ok"
    assert words.out_of('["Mind the *margin* squeeze"]') == f'["{REDACTED}"]'
    assert words.out_of("Mind  the *margin*\nsqueeze") == "Mind  the *margin*\nsqueeze"  # not hers
    assert words.out_of(words.out_of(text)) == words.out_of(text)


def test_the_marker_is_never_taken_for_words_and_a_second_pass_changes_nothing():
    """A form inside the marker ("erased user") is not searched, or a second pass would nest markers;
    one pass replaces the longest form first, and never looks into what it put in."""
    words = Words.of("ann", [REDACTED, "erased user", "long words of an erased user here", "a margin story"])
    assert "erased user" not in words.forms and REDACTED not in words.forms
    once = words.out_of("x long words of an erased user here y, and a margin story")
    assert once == f"x {REDACTED} y, and {REDACTED}"
    assert words.out_of(once) is once


def test_structure_is_never_rewritten_whatever_the_note_said():
    """Notes that read like a field's value ("approve", "buy", "approved", "snapshot") change only free
    text: a decision's action, a recommendation, a status or a data source stay as they are."""
    for said in ("approve", "buy", "approved", "snapshot", "rejected", "NVDA"):
        words = Words.of("ann", [said])
        state = {
            "approval": {"decision": "approved", "by": "carol", "note": "fine", "draft_id": "d1"},
            "decision": {"action": "approve", "by": "carol", "note": "ok", "draft_id": "d1"},
            "draft": {
                "recommendation": "buy",
                "ticker": "NVDA",
                "data_source": "snapshot",
                "markdown": "Report",
            },
        }
        assert _walk(state, words, _plainly) is state, said
    words = Words.of("ann", ["watch the foundry"])
    decision = {
        "action": "approve",
        "by": "carol",
        "note": "as ann said: watch the foundry",
        "draft_id": "d1",
    }
    assert _walk(decision, words, _plainly) == {**decision, "note": f"as ann said: {REDACTED}"}


def test_her_own_decisions_lose_their_note_whatever_its_length_and_others_keep_theirs():
    words = Words.of("ann", ["ok"])
    approvals = [
        {"action": "approve", "by": "ann", "note": "ok", "draft_id": "d1"},
        {"action": "approve", "by": "carol", "note": "ok", "draft_id": "d1"},
    ]
    walked = _walk(approvals, words, _plainly, key="approvals")
    assert [a["note"] for a in walked] == [REDACTED, "ok"] and walked[1] is approvals[1]


def test_an_untouched_value_is_the_very_object_and_a_touched_one_is_rebuilt_around_the_change():
    words = Words.of("ann", ["cut the target price"])
    untouched = {"messages": [HumanMessage("hello")], "feedback": ["bob's own"], "n": 3}
    assert _walk(untouched, words, _plainly) is untouched
    value = {
        "messages": [HumanMessage("Reviewer said: cut the target price"), AIMessage("Done.")],
        "feedback": ["cut the target price"],
        "pending": (Interrupt(value={"description": "- cut the target price"}, id="i1"),),
        "n": 3,
    }
    walked = _walk(value, words, _plainly)
    assert walked["messages"][0].content == f"Reviewer said: {REDACTED}"
    assert walked["messages"][1] is value["messages"][1]
    assert walked["feedback"] == [REDACTED] and walked["n"] == 3
    assert walked["pending"][0].value == {"description": f"- {REDACTED}"} and walked["pending"][0].id == "i1"
    assert value["feedback"] == ["cut the target price"]  # the original is left as it was
    assert _walk(["cut the target price"], words, _plainly, key="feedback") == [REDACTED]  # a channel


def test_a_sealed_decision_is_sealed_again_over_the_redacted_note():
    key = secrets.token_bytes(32)
    seal = DecisionSeal(lambda: key)
    decision = seal.seal(
        "t1", Decision(action="approve", draft_id="d1", by="ann", note="ship it, margins fine", door="cli")
    )
    raw = decision.model_dump(mode="json")
    words = Words.of("ann", ["ship it, margins fine"])
    reseal = resealer("t1", (seal,))
    walked = _walk({"decision": raw}, words, reseal)["decision"]
    assert walked["note"] == REDACTED and walked["by"] == "ann"
    assert seal.sealed("t1", walked) is not None  # the gate still takes it as its own
    assert seal.sealed("t1", {**walked, "by": "mallory"}) is None
    forged = _walk({"decision": {**raw, "seal": "0" * 64}}, words, reseal)["decision"]
    assert seal.sealed("t1", forged) is None  # a copied or made-up seal is not made valid


def test_a_pending_request_is_bound_to_its_redacted_draft():
    words = Words.of("ann", ["cut the target price"])
    request = {
        "kind": "approval_request",
        "description": "## Reviewer feedback\n- cut the target price",
        "content_hash": content_hash("## Reviewer feedback\n- cut the target price"),
        "action_request": {"action": "Approve report", "args": {"content_hash": "old"}},
    }
    reseal = resealer("t1", (DecisionSeal(lambda: b"k" * 32),))
    walked = _walk(request, words, reseal)
    assert walked["content_hash"] == content_hash(walked["description"])
    assert walked["action_request"]["args"]["content_hash"] == walked["content_hash"]


def test_a_sealed_decision_that_would_not_validate_after_redaction_is_one_line_and_nothing_is_sealed():
    import pytest

    from market_analyst.errors import UserError

    seal = DecisionSeal(lambda: b"k" * 32)
    raw = seal.seal(
        "t1", Decision(action="approve", draft_id="d1", by="ann", note="fine", door="cli")
    ).model_dump(mode="json")
    with pytest.raises(UserError, match="a decision on thread t1 cannot be redacted"):
        resealer("t1", (seal,))(raw, {**raw, "action": "bogus"})
