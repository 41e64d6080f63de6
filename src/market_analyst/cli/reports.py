"""`reports list|show`: read the archive of published reports."""

from __future__ import annotations

import sys

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings

app = typer.Typer(help="Read published reports from the archive.", no_args_is_help=True)


@app.command("list")
def list_reports(json_output: bool = JSON_OPTION) -> None:
    """List published reports, oldest first; unreadable documents are skipped with a warning."""
    from market_analyst.persistence.archive import ReportArchive

    archive = ReportArchive(load_settings().archive_dir)
    listed = archive.list()
    for item in listed:
        if item.problem:
            print(f"warning: skipped {item.problem}", file=sys.stderr)
    good = [item for item in listed if item.document is not None]
    if json_output:
        emit_json(
            [
                {k: item.document[k] for k in ("key", "ticker", "user_id", "created_at", "approved_by", "as_of")}
                | {"recommendation": item.document["report"]["recommendation"]}
                for item in good
                if item.document is not None
            ]
        )
        return
    if not good:
        print(f"No published reports in {archive.root}.", file=sys.stderr)
    for item in good:
        d = item.document or {}
        print(f"{d['key']}  {d['ticker']:<6} {d['report']['recommendation']:<5} {d['created_at']}  by {d['approved_by']}")


@app.command("show")
def show_report(key: str = typer.Argument(..., help="The archive key."), json_output: bool = JSON_OPTION) -> None:
    """Print one published report (Markdown, or the whole document with --json)."""
    from market_analyst.errors import UserError
    from market_analyst.persistence.archive import ReportArchive

    archive = ReportArchive(load_settings().archive_dir)
    document = archive.get(key)
    if document is None:
        raise UserError(f"no report with key {key!r} in {archive.root} (list them with: market-analyst reports list)")
    if json_output:
        emit_json(document)
    else:
        print(document["markdown"], end="")
        print(f"\nApproved by {document['approved_by']} at {document['approved_at']}; archive key {document['key']}.")
