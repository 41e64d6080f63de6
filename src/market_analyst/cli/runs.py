"""Commands that start, decide and inspect runs: analyze, approve, reject, revise, resume, status, threads."""

from __future__ import annotations

import sys
from typing import Any

import typer

from market_analyst.choices import CheckpointerKind, Durability, MarketDataKind
from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings, progress_printer
from market_analyst.formatting import pct, signed_pct

DURABILITY_HELP = "When checkpoints are written: sync (default), async or exit. Env: MA_DURABILITY."
CHECKPOINTER_HELP = "postgres (default) or redis. Env: MA_CHECKPOINTER."
DATA_HELP = "Market data: snapshot (default), csv or yfinance. Env: MA_MARKET_DATA."
USER_HELP = "Whose profile and name to use (scoping for a local tool, not authentication). Env: MA_USER."


def _draft_json(view: Any) -> dict[str, Any]:
    data = view.to_json()
    draft = view.draft or {}
    data["pending_node"] = view.next[0] if view.next else None
    for field in ("draft_id", "recommendation", "confidence", "figures", "as_of", "data_source", "headline"):
        data[field] = draft.get(field)
    data["profile"] = (draft.get("profile") or {}).get("statement")
    return data


def _render_draft(view: Any) -> None:
    d = view.draft or {}
    f = d.get("figures") or {}
    print(f"  {d.get('headline')}")
    print(f"  Recommendation: {str(d.get('recommendation')).upper()}, confidence {d.get('confidence'):.2f}")
    print(
        f"  Returns 1M {signed_pct(f.get('return_1m'))}, 3M {signed_pct(f.get('return_3m'))}, "
        f"6M {signed_pct(f.get('return_6m'))}, "
        f"1Y {signed_pct(f.get('return_1y'))}; volatility {pct(f.get('volatility_1y'))}, "
        f"max drawdown {pct(f.get('max_drawdown_1y'))}; RSI(14) {f.get('rsi_14')}; "
        f"trend {f.get('trend')}"
    )
    print(f"  Data: {d.get('data_source')}")
    print(f"  Profile: {(d.get('profile') or {}).get('statement')}")
    analyst = d.get("analyst") or {}
    print(f"  Analyst: {analyst.get('name')} (version {analyst.get('version')})")


def _render_view(view: Any) -> None:
    print(
        f"Thread {view.thread_id}: {view.status.replace('_', ' ')}"
        + (f" ({view.ticker})" if view.ticker else "")
    )
    if view.next:
        print(f"  Next node: {', '.join(view.next)}")
    if view.draft:
        _render_draft(view)
    if view.approval:
        a = view.approval
        print(
            f"  Decision: {a['decision']} by {a['by']} at {a['at']}"
            + (f": {a['note']}" if a.get("note") else "")
        )
    if view.publication:
        print(f"  Archive key: {view.publication['key']}")
    _render_next_steps(view)


def _show(view: Any, json_output: bool) -> None:
    """Print a run's view: the draft's JSON object, or the text rendering."""
    if json_output:
        emit_json(_draft_json(view))
    else:
        _render_view(view)


def _render_next_steps(view: Any) -> None:
    t = view.thread_id
    if view.status == "awaiting_approval":
        print("Next:")
        print(f"  approve: market-analyst approve {t}")
        print(f"  reject:  market-analyst reject {t} --reason '...'")
        print(f"  revise:  market-analyst revise {t} --feedback '...'")
    elif view.status in ("in_progress", "approved_pending_publish"):
        print(f"Next: market-analyst resume {t}")
    elif view.status == "published" and view.publication:
        print(f"Report: market-analyst reports show {view.publication['key']}")


def analyze(
    ticker: str = typer.Argument(..., help="Ticker symbol, for example NVDA."),
    question: str = typer.Option("", "--question", "-q", help="What the report should answer."),
    user: str = typer.Option(None, "--user", help=USER_HELP),
    thread_id: str = typer.Option(None, "--thread-id", help="Use this thread ID instead of a new one."),
    durability: Durability | None = typer.Option(None, "--durability", help=DURABILITY_HELP),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    data: MarketDataKind | None = typer.Option(None, "--data", help=DATA_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Analyse TICKER and stop before publishing, printing the thread ID and how to approve it."""
    from market_analyst.workflow import start_analysis

    settings = load_settings(durability=durability, checkpointer=checkpointer, market_data=data)
    view = start_analysis(
        settings,
        ticker,
        question=question,
        user=user,
        thread_id=thread_id,
        progress=None if json_output else progress_printer(),
    )
    _show(view, json_output)


def approve(
    thread_id: str = typer.Argument(..., help="The thread to approve."),
    user: str = typer.Option(None, "--user", help="Who approves (recorded; MA_APPROVERS may restrict it)."),
    note: str = typer.Option("", "--note", help="A note recorded with the approval."),
    durability: Durability | None = typer.Option(None, "--durability", help=DURABILITY_HELP),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Approve the thread's draft and publish it to the archive."""
    from market_analyst.workflow import approve_thread

    settings = load_settings(durability=durability, checkpointer=checkpointer)
    view = approve_thread(settings, thread_id, user=user, note=note, progress=progress_printer())
    if json_output:
        emit_json(view.to_json())
    else:
        print(f"Published thread {view.thread_id}: archive key {(view.publication or {}).get('key')}")
        if view.publication and not view.publication.get("created"):
            print("  (the archive already held this operation's report; nothing was written twice)")


def reject(
    thread_id: str = typer.Argument(..., help="The thread to reject."),
    reason: str = typer.Option(..., "--reason", help="Why the draft must not be published (required)."),
    user: str = typer.Option(None, "--user", help="Who rejects (recorded)."),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Reject the thread's draft: the run ends and nothing is published."""
    from market_analyst.workflow import reject_thread

    view = reject_thread(load_settings(checkpointer=checkpointer), thread_id, reason=reason, user=user)
    if json_output:
        emit_json(view.to_json())
    else:
        print(f"Rejected thread {view.thread_id}: nothing was published.")


def revise(
    thread_id: str = typer.Argument(..., help="The thread to revise."),
    feedback: str = typer.Option(..., "--feedback", help="What the next draft should address (required)."),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Send feedback, draft again, and stop at the approval gate again."""
    from market_analyst.workflow import revise_thread

    view = revise_thread(
        load_settings(checkpointer=checkpointer),
        thread_id,
        feedback=feedback,
        progress=None if json_output else progress_printer(),
    )
    _show(view, json_output)


def resume(
    thread_id: str = typer.Argument(..., help="The thread to continue."),
    durability: Durability | None = typer.Option(None, "--durability", help=DURABILITY_HELP),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Continue a thread from its last checkpoint (after a crash), up to the gate or to the end."""
    from market_analyst.workflow import resume_thread

    settings = load_settings(durability=durability, checkpointer=checkpointer)
    view = resume_thread(settings, thread_id, progress=None if json_output else progress_printer())
    if json_output:
        emit_json(_draft_json(view))
    else:
        print(f"{view.message.capitalize()}.")
        _render_view(view)


def status(
    thread_id: str = typer.Argument(..., help="The thread to show."),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show where a thread stands: the pending node before approval, the archive key after."""
    from market_analyst.workflow import thread_status

    view = thread_status(load_settings(checkpointer=checkpointer), thread_id)
    _show(view, json_output)


def threads(
    pending: bool = typer.Option(False, "--pending", help="Only threads waiting for approval."),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """List threads and where each stands."""
    from market_analyst.workflow import list_threads

    views = list_threads(load_settings(checkpointer=checkpointer), pending_only=pending)
    if json_output:
        emit_json([_draft_json(v) for v in views])
        return
    if not views:
        print("No threads" + (" wait for approval." if pending else "."), file=sys.stderr)
    for v in views:
        rec = (v.draft or {}).get("recommendation", "-")
        print(f"{v.thread_id}  {v.ticker or '-':<6} {v.status:<26} {rec}")


def register(app: typer.Typer) -> None:
    """Add the run commands to the root app."""
    for command in (analyze, approve, reject, revise, resume, status, threads):
        app.command()(command)
