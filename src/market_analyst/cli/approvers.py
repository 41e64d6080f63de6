"""`approvers add|list|remove|sessions`: who may sign in to the web inbox (`market-analyst serve`)."""

from __future__ import annotations

import sys
from typing import Literal

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings

app = typer.Typer(help="Manage who may sign in to the web inbox.", no_args_is_help=True)


ROLE_HELP = (
    "requester (asks for analyses for themself, on LangGraph's server), reviewer (may only revise), "
    "approver (may approve, reject and revise) or operator (repairs threads on LangGraph's server: "
    "state writes, copies, deletes; decides nothing)."
)
RoleName = Literal["requester", "reviewer", "approver", "operator"]


@app.command("add")
def add(
    name: str = typer.Argument(..., help="The approver's name, recorded with each decision."),
    role: RoleName = typer.Option("approver", "--role", help=ROLE_HELP),
    email: str = typer.Option(None, "--email", help="Where notifications reach them (MA_SMTP_URL)."),
) -> None:
    """Make an approver and print their sign-in token (shown only this once)."""
    from market_analyst.workflow.approvers import add_approver

    token = add_approver(load_settings(), name, role, email)
    print(token)
    print(
        f"Approver {name!r} added as {role}. The token above is shown only now: give it to {name}.",
        file=sys.stderr,
    )


@app.command("role")
def role(
    name: str = typer.Argument(..., help="The approver whose role changes."),
    new_role: RoleName = typer.Argument(..., metavar="ROLE", help=ROLE_HELP),
) -> None:
    """Change an approver's role; it counts from their next decision, in every process."""
    from market_analyst.workflow.approvers import set_role

    set_role(load_settings(), name, new_role)
    print(f"Approver {name!r} is now a {new_role}.")


@app.command("set-email")
def set_email(
    name: str = typer.Argument(..., help="The approver."),
    email: str = typer.Argument(None, help="Their address; without it, they get no more email."),
) -> None:
    """Give an approver the address notifications reach them at (or none)."""
    from market_analyst.workflow.approvers import set_email as change

    change(load_settings(), name, email)
    print(f"Approver {name!r} gets email at {email}." if email else f"Approver {name!r} gets no email.")


@app.command("list")
def list_(json_output: bool = JSON_OPTION) -> None:
    """List the approvers (names and when they were added; never tokens)."""
    from market_analyst.workflow.approvers import list_approvers

    found = list_approvers(load_settings())
    if json_output:
        emit_json(
            [{"name": a.name, "role": a.role, "created_at": a.created_at, "email": a.email} for a in found]
        )
        return
    if not found:
        print("No approvers. Add one with: market-analyst approvers add NAME", file=sys.stderr)
    for approver in found:
        where = f"  {approver.email}" if approver.email else ""
        print(f"{approver.name}  {approver.role}  added {approver.created_at}{where}")


@app.command("remove")
def remove(name: str = typer.Argument(..., help="The approver to remove.")) -> None:
    """Remove an approver: their token and any signed-in session stop working at once."""
    from market_analyst.workflow.approvers import remove_approver

    remove_approver(load_settings(), name)
    print(f"Removed approver {name!r}.")


@app.command("sessions")
def sessions(
    name: str = typer.Argument(..., help="The approver whose sessions to list or end."),
    revoke: bool = typer.Option(False, "--revoke", help="End them now, in every server process."),
    session: str = typer.Option(None, "--session", help="Only this session (its label, from the list)."),
    json_output: bool = JSON_OPTION,
) -> None:
    """List an approver's signed-in web sessions, or end them (--revoke) at once."""
    from datetime import UTC, datetime

    from market_analyst.errors import UserError
    from market_analyst.workflow.approvers import list_sessions, revoke_sessions

    settings = load_settings()
    if session is not None and not revoke:
        raise UserError("--session names the session --revoke ends: add --revoke")
    found = revoke_sessions(settings, name, session) if revoke else list_sessions(settings, name)

    def when(seconds: float) -> str:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")

    rows = [
        {
            "session": s.label,
            "created_at": when(s.created_at),
            "last_seen": when(s.last_seen),
            "client": s.client,
        }
        for s in found
    ]
    if json_output:
        emit_json({"approver": name, "revoked": revoke, "sessions": rows})
        return
    if revoke:
        print(f"Ended {len(rows)} session{'s' if len(rows) != 1 else ''} of {name!r}.")
        return
    if not rows:
        print(f"No signed-in sessions for {name!r}.", file=sys.stderr)
    for row in rows:
        print(
            f"{row['session']}  signed in {row['created_at']}  last seen {row['last_seen']}"
            f"  from {row['client']}"
        )
