"""`approvers add|list|remove`: who may sign in to the web inbox (`market-analyst serve`)."""

from __future__ import annotations

import sys

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings

app = typer.Typer(help="Manage who may sign in to the web inbox.", no_args_is_help=True)


@app.command("add")
def add(name: str = typer.Argument(..., help="The approver's name, recorded with each decision.")) -> None:
    """Make an approver and print their sign-in token (shown only this once)."""
    from market_analyst.workflow.approvers import add_approver

    token = add_approver(load_settings(), name)
    print(token)
    print(f"Approver {name!r} added. The token above is shown only now: give it to {name}.", file=sys.stderr)


@app.command("list")
def list_(json_output: bool = JSON_OPTION) -> None:
    """List the approvers (names and when they were added; never tokens)."""
    from market_analyst.workflow.approvers import list_approvers

    found = list_approvers(load_settings())
    if json_output:
        emit_json([{"name": a.name, "created_at": a.created_at} for a in found])
        return
    if not found:
        print("No approvers. Add one with: market-analyst approvers add NAME", file=sys.stderr)
    for approver in found:
        print(f"{approver.name}  added {approver.created_at}")


@app.command("remove")
def remove(name: str = typer.Argument(..., help="The approver to remove.")) -> None:
    """Remove an approver: their token and any signed-in session stop working at once."""
    from market_analyst.workflow.approvers import remove_approver

    remove_approver(load_settings(), name)
    print(f"Removed approver {name!r}.")
