"""`records migrate`: copy the data directory's records into the PostgreSQL records database."""

from __future__ import annotations

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings

app = typer.Typer(
    help="The records (approvers, audit log, archive) kept for several hosts in PostgreSQL.",
    no_args_is_help=True,
)


@app.command("migrate")
def migrate(
    to: str = typer.Option(..., "--to", help="Where to copy the records: postgres."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Copy the approvers, the audit log and the report archive into PostgreSQL, verified; safe to
    run again."""
    from market_analyst.workflow.records import migrate_records

    result = migrate_records(load_settings(), to=to)
    if json_output:
        emit_json({"changed": result.changed, "stores": [s.to_json() for s in result.stores]})
        return
    for s in result.stores:
        if not s.copied + s.present:
            print(f"{s.store}: no {s.unit} in {s.source}; nothing to copy")
            continue
        print(
            f"{s.store}: {s.copied} {s.unit} copied, {s.present} already present, "
            f"from {s.source} to {s.target}; {s.checked}"
        )
    if not result.changed:
        print("Nothing changed: the records database already held everything.")
