"""`db status|stop`: the embedded PostgreSQL server that runs inside the data directory."""

from __future__ import annotations

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings

app = typer.Typer(help="The embedded PostgreSQL server inside the data directory.", no_args_is_help=True)


@app.command("stop")
def stop() -> None:
    """Stop the embedded server (the next command starts it again)."""
    from market_analyst.workflow.stores import stop_database

    print(stop_database(load_settings()))


@app.command("status")
def status(json_output: bool = JSON_OPTION) -> None:
    """Say whether the embedded server runs: the data directory, its PID and socket."""
    from market_analyst.workflow.stores import database_status

    found = database_status(load_settings())
    if json_output:
        emit_json(found)
    elif found["server"] == "POSTGRES_URL":
        print(f"POSTGRES_URL is set ({found['url']}); the embedded server is not used.")
    elif found["running"]:
        print(f"The embedded PostgreSQL runs in {found['postgres_dir']} (pid {found['pid']}).")
        print(f"  data directory: {found['data_dir']}")
        if found["files"] != found["postgres_dir"]:
            print(f"  server files:   {found['files']}")
        print(f"  socket:         {found['socket']}")
    else:
        where = found["postgres_dir"]
        print(f"The embedded PostgreSQL is not running; it starts with the next command ({where}).")
