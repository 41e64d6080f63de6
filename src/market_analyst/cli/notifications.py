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
        f"Queued {count} dead deliver{'y' if count == 1 else 'ies'} again."
        if count
        else "No dead deliveries."
    )
