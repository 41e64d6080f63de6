"""`profile set|show|delete`: the risk profile every later run of a user is analysed with."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from market_analyst.choices import Horizon, RiskTolerance
from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings

if TYPE_CHECKING:
    from market_analyst.state import ProfileUsed

app = typer.Typer(
    help="Store, show or delete a user's risk profile (kept across runs, in Qdrant).",
    no_args_is_help=True,
)

USER_HELP = (
    "Whose profile: 1-64 letters, digits, '.', '_', '@' or '-' (scoping for a local tool, "
    "not authentication). Env: MA_USER; default 'local'."
)


def _render(used: ProfileUsed) -> None:
    from market_analyst.rendering import profile_statement

    p = used.profile
    print(profile_statement(used, tense="present"))
    if used.source == "default":
        return
    print(f"  risk tolerance:    {p.risk_tolerance}")
    print(f"  horizon:           {p.horizon}")
    print(f"  preferred sectors: {', '.join(p.preferred_sectors) or '(none)'}")
    print(f"  notes:             {p.notes or '(none)'}")
    print(f"  updated at:        {p.updated_at}")


def _show(used: ProfileUsed, json_output: bool) -> None:
    if json_output:
        emit_json(used.model_dump(mode="json"))
    else:
        _render(used)


@app.command("set")
def set_profile(
    user: str = typer.Option(None, "--user", help=USER_HELP),
    risk_tolerance: RiskTolerance | None = typer.Option(
        None, "--risk-tolerance", help="conservative, moderate or aggressive (sets the analyst's limits)."
    ),
    horizon: Horizon | None = typer.Option(
        None, "--horizon", help="short, medium or long (weights short against long returns)."
    ),
    sectors: str = typer.Option(
        None, "--sectors", help="Comma-separated sectors, e.g. 'semiconductors,software'; '' clears them."
    ),
    notes: str = typer.Option(None, "--notes", help="Free text, at most 500 characters; '' clears."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Create or change a profile. On an existing profile only the options given change."""
    from market_analyst.workflow.stores import set_profile as store_profile

    used = store_profile(
        load_settings(), user, risk_tolerance=risk_tolerance, horizon=horizon, sectors=sectors, notes=notes
    )
    if not json_output:
        print(f"Saved the profile of user {used.profile.user_id!r}.")
    _show(used, json_output)


@app.command("show")
def show_profile(
    user: str = typer.Option(None, "--user", help=USER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show the profile a run for this user would use: the stored one, or the defaults."""
    from market_analyst.workflow.stores import show_profile as profile_for

    _show(profile_for(load_settings(), user), json_output)


@app.command("delete")
def delete_profile(
    user: str = typer.Option(None, "--user", help=USER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Delete a stored profile; later runs for the user use the defaults."""
    from market_analyst.workflow.stores import delete_profile as remove_profile

    user_id, deleted = remove_profile(load_settings(), user)
    if json_output:
        emit_json({"user_id": user_id, "deleted": deleted})
    elif deleted:
        print(f"Deleted the profile of user {user_id!r}; runs now use the defaults.")
    else:
        print(f"No stored profile for user {user_id!r}; nothing to delete.")


@app.command("migrate")
def migrate_profiles(json_output: bool = JSON_OPTION) -> None:
    """Move profiles from a Qdrant local-mode folder (earlier versions' store) to Qdrant Edge now.

    Every command does this on first use; the old folder is kept beside the new store."""
    from market_analyst.workflow.stores import migrate_profiles as migrate

    done = migrate(load_settings())
    backup = str(done.backup) if done.backup else None
    if json_output:
        emit_json({"store": str(done.store), "moved": done.moved, "backup": backup})
    elif backup:
        print(
            f"Moved {done.moved} profiles from the Qdrant local-mode folder to Qdrant Edge in "
            f"{done.store}; the old folder is kept as {backup} (delete it once you no longer need it)."
        )
    else:
        print(f"Nothing to migrate: {done.store} holds no Qdrant local-mode folder.")
