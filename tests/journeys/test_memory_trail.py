"""A second look at a ticker hears its decision trail: what the reviewer asked, what the approver
said and what was published on the owner's own threads on that ticker reach the next draft whatever
the question, newest first and capped, each with who said it, under "On TICKER"; recall by meaning
fills the rest ("Recalled by meaning"). Nothing of another owner's, and nothing forgotten."""

from __future__ import annotations

from typing import Any

from tests.support.backends import both_backends
from tests.support.cli import Cli, unique_id

FEEDBACK = "Explain the foundry concentration risk in plain words"
NOTE = "fine, but watch the export licences"
VAGUE = "anything I worried about before?"
T0 = 1764547200  # 2025-12-01T00:00:00Z


def _draft(cli: Cli, ticker: str, user: str, question: str) -> dict[str, Any]:
    thread = cli.ok("analyze", ticker, "--user", user, "--question", question, "--json").json()["thread_id"]
    return cli.ok("status", thread, "--json").json()["draft"]


@both_backends
def test_the_second_draft_of_a_ticker_shows_its_trail_with_who_said_it(cli: Cli):
    dora, erin = unique_id("dora"), unique_id("erin")
    first = cli.ok("analyze", "NVDA", "--user", dora, "--json").json()["thread_id"]
    cli.ok("revise", first, "--user", "rev.kim", "--feedback", FEEDBACK)
    cli.ok("approve", first, "--user", "dana", "--note", NOTE)

    draft = _draft(cli, "NVDA", dora, VAGUE)
    trail = [m for m in draft["memories"] if m["why"] == "ticker_trail"]
    assert [m["kind"] for m in trail] == ["report", "approval_note", "feedback"], trail  # newest first
    shown = {m["kind"]: (m["said_by"], m["text"]) for m in trail}
    assert shown["feedback"] == ("rev.kim (reviewer)", FEEDBACK)
    assert shown["approval_note"] == ("dana (approver)", NOTE)
    assert shown["report"][0] == "approved by dana"
    assert shown["report"][1].startswith("Published report on NVDA")
    assert all(m["thread_id"] == first and m["trail_more"] == 0 for m in trail)
    markdown = draft["markdown"]
    on_nvda = markdown.index("On NVDA, from your own threads, newest first:")
    for said in (FEEDBACK, NOTE):
        assert markdown.index(said) > on_nvda
    assert all(m["id"] not in {t["id"] for t in trail} for m in draft["memories"] if m["why"] == "similar")

    # Another user's analysis of NVDA hears none of it.
    other = _draft(cli, "NVDA", erin, VAGUE)
    assert not other["memories"], other["memories"]
    assert FEEDBACK not in other["markdown"] and NOTE not in other["markdown"]

    # A forgotten memory is never in the trail again.
    [note] = [m for m in trail if m["kind"] == "approval_note"]
    cli.ok("memories", "forget", note["id"], "--user", dora)
    again = _draft(cli, "NVDA", dora, VAGUE)
    assert NOTE not in again["markdown"]
    assert {m["kind"] for m in again["memories"] if m["why"] == "ticker_trail"} == {"feedback", "report"}


def test_a_trail_longer_than_its_cap_shows_the_newest_and_says_how_many_more(cli: Cli):
    dora = unique_id("dora")
    for n in range(1, 5):  # a minute apart (times are kept to the second)
        at = {"SOURCE_DATE_EPOCH": str(T0 + 60 * n)}
        thread = cli.ok("analyze", "MSFT", "--user", dora, "--json", extra_env=at).json()["thread_id"]
        cli.ok(
            "reject", thread, "--user", "rev.kim", "--reason", f"reason number {n}: too early", extra_env=at
        )
    cli.ok("remember", "MSFT dividends matter to me", "--user", dora, "--ticker", "MSFT")

    draft = _draft(cli, "MSFT", dora, "what next?")
    trail = [m for m in draft["memories"] if m["why"] == "ticker_trail"]
    assert [m["text"] for m in trail] == [f"reason number {n}: too early" for n in (4, 3, 2)]
    assert all(m["trail_more"] == 1 for m in trail)
    assert "- and 1 earlier on MSFT, not shown" in draft["markdown"]
    # A note kept with `remember` is not a thread's decision: it is never part of the trail.
    assert all(m["kind"] != "remembered" for m in trail)


def test_the_llm_analyst_gets_the_trail_and_the_related_notes_as_two_lists(cli: Cli):
    from tests.support.chat_server import ChatServer

    dora = unique_id("dora")
    first = cli.ok("analyze", "NVDA", "--user", dora, "--json").json()["thread_id"]
    cli.ok("revise", first, "--user", "rev.kim", "--feedback", FEEDBACK)
    cli.ok("approve", first, "--user", "dana", "--note", NOTE)
    cli.ok("remember", "I prefer firms that hold net cash", "--user", dora)
    answer = {
        "recommendation": "hold",
        "confidence": 0.5,
        "summary": "Held: the earlier notes on this ticker were read as data.",
        "risk_factors": ["export licences"],
    }
    with ChatServer([{"answer": answer}]) as server:
        cli.ok(
            "analyze", "NVDA", "--user", dora, "--question", "do they hold net cash?", extra_env=server.env()
        )
        assert server.violations == []
        prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "Notes on NVDA from this investor's own earlier threads, newest first" in prompt
    trail = prompt.split('<data name="notes on this ticker from earlier threads">', 1)[1].split("</data>", 1)[
        0
    ]
    related = prompt.split('<data name="notes from earlier runs">', 1)[1].split("</data>", 1)[0]
    assert FEEDBACK in trail and NOTE in trail and "Published report on NVDA" in trail
    assert "net cash" in related and FEEDBACK not in related and NOTE not in related
