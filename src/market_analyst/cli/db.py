"""`db status|stop`: the embedded PostgreSQL server that runs inside the data directory."""

from __future__ import annotations

import typer

from market_analyst.cli.common import load_settings

app = typer.Typer(help="The embedded PostgreSQL server inside the data directory.", no_args_is_help=True)


@app.command("stop")
def stop() -> None:
    """Stop the embedded server (the next command starts it again)."""
    from market_analyst.workflow.stores import stop_database

    print(stop_database(load_settings()))


@app.command("status")
def status() -> None:
    """Say whether the embedded server runs, and where."""
    from market_analyst.workflow.stores import database_status

    print(database_status(load_settings()))
