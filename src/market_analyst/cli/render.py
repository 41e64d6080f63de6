"""How the run commands show a thread: text for people, one JSON object with --json."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from market_analyst.cli.common import emit_json
from market_analyst.errors import RunStopped
from market_analyst.formatting import one_decimal, pct, price, printable, signed_pct, two_decimals


def thread_json(view: Any) -> dict[str, Any]:
    """A thread as every run command prints it with --json (docs/thread.schema.json): where it stands
    at the top level, the draft once, under `draft`, with its figures at full precision."""
    data: dict[str, Any] = view.to_json()
    data["pending_node"] = view.next[0] if view.next else None
    return data


def render_draft(view: Any) -> None:
    """The draft's headline, recommendation and figures, a few lines."""
    d = view.draft or {}
    f = d.get("figures") or {}
    print(f"  {d.get('headline')}")
    print(f"  Recommendation: {str(d.get('recommendation')).upper()}, confidence {d.get('confidence'):.2f}")
    print(
        f"  Returns 1M {signed_pct(f.get('return_1m'))}, 3M {signed_pct(f.get('return_3m'))}, "
        f"6M {signed_pct(f.get('return_6m'))}, "
        f"1Y {signed_pct(f.get('return_1y'))}; volatility {pct(f.get('volatility_1y'))}, "
        f"max drawdown {pct(f.get('max_drawdown_1y'))}; RSI(14) {one_decimal(f.get('rsi_14'))}"
    )
    print(
        f"  Trend {f.get('trend')}: SMA 50 {price(f.get('sma_50'))}, SMA 200 {price(f.get('sma_200'))}"
        + _beta(f.get("benchmark"))
    )
    print(f"  Data: {d.get('data_source')}")
    print(f"  Profile: {(d.get('profile') or {}).get('statement')}")
    analyst = d.get("analyst") or {}
    print(f"  Analyst: {analyst.get('name')} (version {analyst.get('version')})")
    memories = d.get("memories") or []
    if memories:
        print("  What was said before:")
        for m in memories:
            source = f"thread {m.get('thread_id')}" if m.get("thread_id") else "no thread"
            who = f"{printable(str(m['said_by']))}: " if m.get("said_by") else ""
            print(f"    {m.get('date')} {who}{m.get('kind')} ({source}): {printable(str(m.get('text')))}")


def _beta(benchmark: Any) -> str:
    if not isinstance(benchmark, dict):
        return ""
    return (
        f"; beta {two_decimals(benchmark.get('beta'))} against the S&P 500, "
        f"relative return {signed_pct(benchmark.get('relative_return'))} "
        f"({benchmark.get('window_start')} to {benchmark.get('window_end')})"
    )


def render_view(view: Any) -> None:
    """Where the thread stands, its draft and decision, and the commands that go on from there."""
    print(
        f"Thread {view.thread_id}: {view.status.replace('_', ' ')}"
        + (f" ({view.ticker})" if view.ticker else "")
    )
    if view.next:
        print(f"  Next node: {', '.join(view.next)}")
    if view.draft:
        render_draft(view)
    request = view.request or {}
    if request:
        print(
            f"  Draft: revision {request.get('revision')}, draft {request.get('draft_id')}, content hash "
            f"{str(request.get('content_hash'))[:16]}; asked by {request.get('requested_by')}; "
            f"{len(request.get('approvals') or [])} of {request.get('approvals_needed')} approvals"
        )
        times = [
            f"{what} {request[key]}"
            for what, key in (
                ("due by", "due_at"),
                ("expires at", "expires_at"),
                ("expired at", "expired_at"),
            )
            if request.get(key) and not (key == "expires_at" and request.get("expired_at"))
        ]
        if times:
            print(f"  Decision {'; '.join(times)}")
    if view.approval:
        a = view.approval
        print(
            f"  Decision: {a['decision']} by {a['by']} at {a['at']}"
            + (f": {a['note']}" if a.get("note") else "")
        )
    if view.publication:
        print(f"  Archive key: {view.publication['key']}")
    render_next_steps(view)


def render_approval(view: Any) -> None:
    """What an approval did: published (with the key), or counted while the quorum is short. Never
    "published" for a thread that was not."""
    if view.status == "published" and view.publication:
        print(f"Published thread {view.thread_id}: archive key {view.publication['key']}")
        if not view.publication.get("created"):
            print("  (the archive already held this operation's report; nothing was written twice)")
        return
    request = view.request or {}
    if view.status == "awaiting_approval" and request.get("approvals"):
        count, needed = len(request["approvals"]), request.get("approvals_needed")
        print(
            f"Approval recorded for thread {view.thread_id} (revision {request.get('revision')}, draft "
            f"{request.get('draft_id')}): {count} of {needed} approvals; nothing is published until "
            "another approver approves this draft."
        )
        return
    print(f"Thread {view.thread_id} was not published; it is {view.status.replace('_', ' ')}.")
    render_view(view)


def show(view: Any, json_output: bool) -> None:
    """Print a run's view: the draft's JSON object, or the text rendering."""
    if json_output:
        emit_json(thread_json(view))
    else:
        render_view(view)


def render_next_steps(view: Any) -> None:
    """The commands that take the thread further from where it stands."""
    t = view.thread_id
    if view.status == "awaiting_approval":
        print("Next:")
        print(f"  approve: market-analyst approve {t}")
        print(f"  reject:  market-analyst reject {t} --reason '...'")
        print(f"  revise:  market-analyst revise {t} --feedback '...'")
    elif view.status == "expired":
        print("Next: the draft expired and can no longer be approved; revise drafts it again:")
        print(f"  revise:  market-analyst revise {t} --feedback '...'")
        print(f"  reject:  market-analyst reject {t} --reason '...'")
    elif view.status in ("in_progress", "approved_pending_publish"):
        print(f"Next: market-analyst resume {t}")
    elif view.status == "published" and view.publication:
        print(f"Report: market-analyst reports show {view.publication['key']}")


def render_revision(view: Any) -> None:
    """What `revise` changed: the revision, the feedback and options, and the difference."""
    extra, changes = view.extra, view.extra["changes"]
    print(f"Revision {extra['revision']} of thread {view.thread_id}")
    if extra.get("feedback"):
        print(f"  Feedback: {extra['feedback']}")
    for name, value in sorted((extra.get("options") or {}).items()):
        print(f"  {name.replace('_', ' ').capitalize()}: {value}")
    before, after = changes["recommendation"]
    print(
        f"  Recommendation: {before.upper()} -> {after.upper()}"
        if before != after
        else f"  Recommendation: {after.upper()} (unchanged)"
    )
    old, new = changes["confidence"]
    print(f"  Confidence: {old:.2f} -> {new:.2f}" if old != new else f"  Confidence: {new:.2f} (unchanged)")
    for risk in changes["risk_factors_added"]:
        print(f"  + risk: {risk}")
    for risk in changes["risk_factors_removed"]:
        print(f"  - risk: {risk}")
    print(f"  Text: {changes['lines_added']} lines added, {changes['lines_removed']} removed")
    for note in (view.draft or {}).get("feedback_notes") or []:
        verdict = "addressed" if note["acted"] else "recorded, not acted on"
        print(f"  Feedback '{note['feedback']}': {verdict}: {note['response']}")


@contextmanager
def stops_as_json(json_output: bool) -> Iterator[None]:
    """With --json, a run that stopped on an error also prints one object: thread, status, error."""
    try:
        yield
    except RunStopped as exc:
        if json_output:
            emit_json({"thread_id": exc.thread_id, "status": exc.status, "error": str(exc)})
        raise
