"""`audit list|verify|export`: who decided what, on which draft, when, and through which door."""

from __future__ import annotations

import sys
from typing import Literal

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings

app = typer.Typer(help="Read the audit log of decisions and publications.", no_args_is_help=True)


@app.command("list")
def list_(
    thread_id: str = typer.Option(None, "--thread", help="Only this thread's entries."),
    json_output: bool = JSON_OPTION,
) -> None:
    """List the entries, oldest first: time, action, who (verified or not), door, thread and draft."""
    from market_analyst.workflow.audit import audit_entries

    entries = audit_entries(load_settings(), thread_id)
    if json_output:
        emit_json(entries)
        return
    if not entries:
        print(
            "No audit entries." if thread_id is None else f"No audit entries for thread {thread_id}.",
            file=sys.stderr,
        )
    for e in entries:
        who = "(erased)" if e["erased"] else (e.get("actor") or "-")
        how = "verified" if e.get("verified") else "unverified"
        where = f"thread {e['thread_id']} draft {e['draft_id']}" if e.get("thread_id") else ""
        if e["action"] == "erased":
            where = f"personal content of entries {', '.join(str(s) for s in e.get('erased_seqs') or [])}"
        text = f": {e['note']}" if e.get("note") else ""
        key = f" -> {e['archive_key']}" if e.get("archive_key") else ""
        door = e.get("door") or "-"
        print(f"{e['seq']:>5}  {e['at']}  {e['action']:<9} {who} ({how}, {door})  {where}{key}{text}")


@app.command("verify")
def verify() -> None:
    """Recompute the hash chain; exit 2 naming the first entry that does not match."""
    from market_analyst.workflow.audit import verify_audit

    entries, erased = verify_audit(load_settings())
    print(
        f"The audit log verifies: {entries} entries, one chain" + (f" ({erased} erased)." if erased else ".")
    )


@app.command("export")
def export(
    fmt: Literal["jsonl", "csv"] = typer.Option(
        "jsonl", "--format", help="jsonl (the entries as stored) or csv."
    ),
) -> None:
    """Print the whole log as JSON lines or CSV."""
    from market_analyst.workflow.audit import export_audit

    sys.stdout.write(export_audit(load_settings(), fmt))
