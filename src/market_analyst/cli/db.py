"""`db status|stop`: the embedded PostgreSQL server that runs inside the data directory."""

from __future__ import annotations

import typer

from market_analyst.cli.common import load_settings

app = typer.Typer(help="The embedded PostgreSQL server inside the data directory.", no_args_is_help=True)


@app.command("stop")
def stop() -> None:
    """Stop the embedded server (the next command starts it again)."""
    from market_analyst.services import stop_embedded_postgres

    settings = load_settings()
    if stop_embedded_postgres(settings.postgres_dir):
        print(f"Stopped the embedded PostgreSQL in {settings.postgres_dir}.")
    else:
        print(f"No embedded PostgreSQL runs in {settings.postgres_dir}.")


@app.command("status")
def status() -> None:
    """Say whether the embedded server runs, and where."""
    settings = load_settings()
    pid_file = settings.postgres_dir / "postmaster.pid"
    if settings.postgres_url:
        from market_analyst.persistence.checkpointers import redact_url

        print(f"POSTGRES_URL is set ({redact_url(settings.postgres_url)}); the embedded server is not used.")
    elif pid_file.exists():
        print(
            f"The embedded PostgreSQL runs in {settings.postgres_dir} "
            f"(pid {pid_file.read_text().split()[0]})."
        )
    else:
        print(
            "The embedded PostgreSQL is not running; it starts with the next command "
            f"({settings.postgres_dir})."
        )
