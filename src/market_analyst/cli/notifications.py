"""`worker` and `notifications list|retry`: the delivery of events (signed webhooks)."""

from __future__ import annotations

import sys

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings

app = typer.Typer(help="See and re-send the events delivered to webhooks.", no_args_is_help=True)


def worker() -> None:
    """Deliver events (a worker of the job queue; `serve` runs one too) until interrupted."""
    from market_analyst.web.server import log_to_stderr
    from market_analyst.workflow.notifications import run_worker

    settings = load_settings()
    log_to_stderr()
    run_worker(
        settings,
        lambda where: print(f"Delivering notifications from {where}; Ctrl-C stops.", file=sys.stderr),
    )


@app.command("list")
def list_(
    dead: bool = typer.Option(False, "--dead", help="Only deliveries that ran out of attempts."),
    thread_id: str = typer.Option(None, "--thread", help="Only this thread's events."),
    json_output: bool = JSON_OPTION,
) -> None:
    """List deliveries, oldest event first: event, kind, thread, receiver, status, attempts."""
    from market_analyst.workflow.notifications import deliveries

    rows = deliveries(load_settings(), dead=dead, thread_id=thread_id)
    if json_output:
        emit_json(rows)
        return
    if not rows:
        print("No deliveries." if not dead else "No dead deliveries.", file=sys.stderr)
    for r in rows:
        why = f"  {r['last_error']}" if r["last_error"] and r["status"] != "delivered" else ""
        print(
            f"{r['event_id']}  {r['kind']:<9} thread {r['thread_id']}  {r['receiver']}  "
            f"{r['status']} ({r['attempts']} attempt{'s' if r['attempts'] != 1 else ''}){why}"
        )


@app.command("retry")
def retry(
    event_id: str = typer.Argument(None, help="The event to send again (all dead ones without it)."),
) -> None:
    """Send a dead-lettered event (or every dead one) once more, with its own ID."""
    from market_analyst.workflow.notifications import retry as send_again

    count = send_again(load_settings(), event_id)
    print(
        f"{count} dead deliver{'y is' if count == 1 else 'ies are'} pending again: a running worker sends "
        f"{'it' if count == 1 else 'them'} within a second ('market-analyst worker', or serve)."
        if count
        else "No dead deliveries."
    )


@app.command("preview")
def preview(
    thread_id: str = typer.Argument(..., help="A thread waiting for a decision."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show a thread's due times under the current settings, and what has fallen due by now."""
    from market_analyst.workflow.notifications import preview as schedule_of

    p = schedule_of(load_settings(), thread_id)
    if json_output:
        emit_json(p)
        return
    print(f"Thread {p['thread_id']}, draft {p['draft_id']} ({p['status'].replace('_', ' ')}):")
    print(f"  requested  {p['requested_at']}")
    print(f"  due        {p['due_at'] or '- (MA_DECISION_DUE is not set)'}")
    reminders = ", ".join(p["reminders"]) or "- (MA_REMIND_EVERY is not set, or none before the expiry)"
    print(f"  reminders  {reminders}")
    to = f" to {', '.join(p['escalate_to'])}" if p["escalate_to"] else ""
    print(f"  escalated  {(p['escalate_at'] or '-') + to}")
    print(f"  expires    {p['expires_at'] or '- (MA_EXPIRE_AFTER is not set)'}")
    print(f"  by now ({p['now']}): {'; '.join(p['fallen_due']) or 'nothing has fallen due'}")
    print(f"  sent to    {p['webhook'] or '- (MA_WEBHOOK_URL is not set)'}")
