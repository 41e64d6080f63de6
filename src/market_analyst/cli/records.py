"""`records migrate`: copy the data directory's records into the PostgreSQL records database;
`records encrypt`: seal the threads written before checkpoints were encrypted."""

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
    """Copy the approvers, the threads' data keys, the audit log and the report archive into
    PostgreSQL, verified; safe to run again, and run again after the switch it copies what the files
    gained since."""
    from market_analyst.errors import UserError
    from market_analyst.workflow.records import migrate_records

    result = migrate_records(load_settings(), to=to)
    if json_output:
        emit_json(
            {
                "changed": result.changed,
                "stores": [s.to_json() for s in result.stores],
                "problems": result.problems,
            }
        )
    else:
        for s in result.stores:
            if not s.copied + s.present:
                print(f"{s.store}: no {s.unit} in {s.source}; nothing to copy")
                continue
            print(
                f"{s.store}: {s.copied} {s.unit} copied, {s.present} already present, "
                f"from {s.source} to {s.target}; {s.checked}"
            )
        if not result.changed and not result.problems:
            print("Nothing changed: the records database already held everything.")
    if result.problems:
        raise UserError("; ".join(result.problems))


@app.command("encrypt")
def encrypt(json_output: bool = JSON_OPTION) -> None:
    """Seal what threads written before checkpoint encryption hold in clear under each thread's data
    key, a thread at a time; safe to run again, and resumed where a killed run stopped."""
    from market_analyst.errors import UserError
    from market_analyst.workflow.records import encrypt_threads

    result = encrypt_threads(load_settings())
    if json_output:
        emit_json({"threads": result.threads, "sealed": result.sealed, "busy": result.busy})
    else:
        values = sum(result.sealed.values())
        print(
            f"Sealed {values} value(s) in {len(result.sealed)} of {result.threads} thread(s); "
            f"the other {result.threads - len(result.sealed) - len(result.busy)} held nothing in clear."
        )
    if result.busy:
        raise UserError(
            f"{len(result.busy)} thread(s) were busy and kept as they were: {', '.join(result.busy)}; "
            "run records encrypt again"
        )
