"""`reports list|show|search`: read the archive of published reports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings
from market_analyst.errors import UserError

if TYPE_CHECKING:
    from market_analyst.settings import Settings

app = typer.Typer(help="Read published reports from the archive.", no_args_is_help=True)

TICKER_OPTION = typer.Option(None, "--ticker", help="Only reports on this ticker.")
LIMIT_OPTION = typer.Option(50, "--limit", help="Show at most this many, newest first.")
USER_OPTION = typer.Option(None, "--user", help="Only reports of this user.")


def _print_listing(
    ticker: str | None, user: str | None, text: str | None, limit: int, json_output: bool
) -> None:
    from market_analyst.workflow.stores import find_reports

    listing = find_reports(load_settings(), ticker=ticker, user=user, text=text, limit=limit)
    for problem in listing.problems:
        print(f"warning: {problem}", file=sys.stderr)
    if listing.more:
        print(f"... and {listing.more} more; raise --limit or narrow the search to see them", file=sys.stderr)
    if json_output:
        emit_json([r.to_json() for r in listing.reports])
        return
    if not listing.reports:
        print(f"No matching reports in {listing.location}.", file=sys.stderr)
    for r in listing.reports:
        print(
            f"{r.key}  {r.ticker:<6} {r.recommendation:<5} {r.created_at}  "
            f"user {r.user_id}  approved by {r.approved_by}"
        )


@app.command("list")
def list_reports(
    ticker: str = TICKER_OPTION,
    user: str = USER_OPTION,
    limit: int = LIMIT_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """List published reports, newest first; unreadable documents are skipped with a warning."""
    _print_listing(ticker, user, None, limit, json_output)


@app.command("search")
def search_reports(
    text: str = typer.Argument(None, help="Text the report must contain (case-insensitive)."),
    ticker: str = TICKER_OPTION,
    user: str = USER_OPTION,
    limit: int = LIMIT_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Find published reports by text, ticker and user, newest first."""
    if not (text or ticker or user):
        raise UserError("reports search needs text, --ticker or --user (or use: market-analyst reports list)")
    _print_listing(ticker, user, text, limit, json_output)


@app.command("show")
def show_report(
    key: str = typer.Argument(..., help="The archive key."),
    json_output: bool = JSON_OPTION,
    html: Path = typer.Option(
        None, "--html", help="Write the report's web page, chart included, as one standalone file here."
    ),
) -> None:
    """Print one published report (Markdown, or the whole document with --json), or write its page."""
    from market_analyst.workflow.stores import read_report

    settings = load_settings()
    document = read_report(settings, key)
    if html is not None:
        _write_page(document, settings, html)
    elif json_output:
        emit_json(document)
    else:
        print(document["markdown"], end="")
        print(
            f"\nApproved by {document['approved_by']} at {document['approved_at']}; "
            f"archive key {document['key']}."
        )


def _write_page(document: dict[str, Any], settings: Settings, path: Path) -> None:
    from market_analyst.web.render import standalone_report

    try:
        path.write_text(standalone_report(document, settings), encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    print(f"Wrote {path} (report {document['key']}, one file: open it in a browser).")
