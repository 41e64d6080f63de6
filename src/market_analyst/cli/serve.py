"""`serve`: the approval inbox and its JSON API (`approvers` says who may sign in)."""

from __future__ import annotations

import sys

import typer

from market_analyst.cli.common import load_settings


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback by default)."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    allow_remote: bool = typer.Option(
        False, "--allow-remote", help="Allow an address other machines can reach (needs an approver)."
    ),
) -> None:
    """Serve the approval inbox and its JSON API until interrupted."""
    from market_analyst.web.server import check_binding, warm_up
    from market_analyst.web.server import serve as run_server

    settings = load_settings()
    count = check_binding(settings, host, allow_remote)
    where = f"[{host}]" if ":" in host else host
    print(
        f"Approval inbox on http://{where}:{port}/ (API reference at /docs); Ctrl-C stops it.",
        file=sys.stderr,
    )
    if count == 0:
        print("No approvers yet: add one with 'market-analyst approvers add NAME'.", file=sys.stderr)
    for store, problem in warm_up(settings).items():
        print(f"warning: {store}: {problem}", file=sys.stderr)
    run_server(settings, host, port)
