"""`profile set|show|delete`: the risk profile every later run of a user is analysed with."""

from __future__ import annotations

from typing import Any

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings

app = typer.Typer(
    help="Store, show or delete a user's risk profile (kept across runs, in Qdrant).",
    no_args_is_help=True,
)

USER_HELP = (
    "Whose profile: 1-64 letters, digits, '.', '_', '@' or '-' (scoping for a local tool, "
    "not authentication). Env: MA_USER; default 'local'."
)


def _store_and_user(user: str | None) -> tuple[Any, str]:
    from market_analyst.persistence.profiles import ProfileStore
    from market_analyst.state import DEFAULT_USER

    settings = load_settings()
    # `--user ""` must be refused as empty, not replaced by the default: only an absent option defaults.
    user_id = user if user is not None else settings.user or DEFAULT_USER
    return ProfileStore.from_settings(settings), user_id


def _render(used: Any) -> None:
    from market_analyst.nodes.draft_report import profile_statement

    p = used.profile
    if used.source == "default":
        print(
            f"No stored profile for user {p.user_id!r}; runs use the defaults ({p.risk_tolerance} risk "
            f"tolerance, {p.horizon} horizon). Set one with: market-analyst profile set --user {p.user_id} "
            "--risk-tolerance conservative|moderate|aggressive --horizon short|medium|long"
        )
        return
    print(profile_statement(used))
    print(f"  risk tolerance:    {p.risk_tolerance}")
    print(f"  horizon:           {p.horizon}")
    print(f"  preferred sectors: {', '.join(p.preferred_sectors) or '(none)'}")
    print(f"  notes:             {p.notes or '(none)'}")
    print(f"  updated at:        {p.updated_at}")


@app.command("set")
def set_profile(
    user: str = typer.Option(None, "--user", help=USER_HELP),
    risk_tolerance: str = typer.Option(
        None, "--risk-tolerance", help="conservative, moderate or aggressive (sets the analyst's limits)."
    ),
    horizon: str = typer.Option(
        None, "--horizon", help="short, medium or long (weights short against long returns)."
    ),
    sectors: str = typer.Option(
        None, "--sectors", help="Comma-separated sectors, e.g. 'semiconductors,software'; '' clears them."
    ),
    notes: str = typer.Option(None, "--notes", help="Free text, at most 500 characters; '' clears."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Create or change a profile. On an existing profile only the options given change."""
    from market_analyst.persistence.profiles import parse_sectors
    from market_analyst.state import ProfileUsed

    store, user_id = _store_and_user(user)
    profile = store.update(
        user_id,
        risk_tolerance=risk_tolerance,
        horizon=horizon,
        preferred_sectors=None if sectors is None else parse_sectors(sectors),
        notes=notes,
    )
    used = ProfileUsed(source="stored", profile=profile)
    if json_output:
        emit_json(used.model_dump(mode="json"))
    else:
        print(f"Saved the profile of user {user_id!r}.")
        _render(used)


@app.command("show")
def show_profile(
    user: str = typer.Option(None, "--user", help=USER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show the profile a run for this user would use: the stored one, or the defaults."""
    from market_analyst.nodes.load_profile import profile_in_use

    store, user_id = _store_and_user(user)
    used = profile_in_use(store, user_id)
    if json_output:
        emit_json(used.model_dump(mode="json"))
    else:
        _render(used)


@app.command("delete")
def delete_profile(
    user: str = typer.Option(None, "--user", help=USER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Delete a stored profile; later runs for the user use the defaults."""
    store, user_id = _store_and_user(user)
    deleted = store.delete(user_id)
    if json_output:
        emit_json({"user_id": user_id, "deleted": deleted})
    elif deleted:
        print(f"Deleted the profile of user {user_id!r}; runs now use the defaults.")
    else:
        print(f"No stored profile for user {user_id!r}; nothing to delete.")
