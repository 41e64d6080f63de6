"""`serve`: the approval inbox and its JSON API (`approvers` says who may sign in)."""

from __future__ import annotations

import sys

import typer

from market_analyst.cli.common import load_settings

LOOPBACK_PROXIES = ("127.0.0.1", "::1")


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback by default)."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    allow_remote: bool = typer.Option(
        False, "--allow-remote", help="Allow an address other machines can reach (needs an approver)."
    ),
    allowed_host: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="A host name to answer to besides --host (repeatable; adds to MA_ALLOWED_HOSTS).",
    ),
    behind_proxy: bool = typer.Option(
        False,
        "--behind-proxy",
        help="A TLS proxy on this machine forwards requests: believe its X-Forwarded-Proto/-For "
        "(from MA_TRUSTED_PROXIES, or loopback when that is empty).",
    ),
    trusted_proxy: list[str] = typer.Option(
        [],
        "--trusted-proxy",
        help="A proxy address or network to believe (repeatable; adds to MA_TRUSTED_PROXIES).",
    ),
) -> None:
    """Serve the approval inbox and its JSON API until interrupted."""
    from market_analyst.web.server import check_binding, log_to_stderr, warm_up
    from market_analyst.web.server import serve as run_server
    from market_analyst.workflow.replicas import sharing_notes

    settings = load_settings()
    notes = sharing_notes(settings)
    proxies = set(settings.trusted_proxies) | set(trusted_proxy)
    if behind_proxy and not proxies:
        proxies = set(LOOPBACK_PROXIES)
    settings = settings.with_checked(
        allowed_hosts=",".join(sorted(settings.allowed_hosts | set(allowed_host))),
        trusted_proxies=",".join(sorted(proxies)),
    )
    count = check_binding(settings, host, allow_remote)
    where = f"[{host}]" if ":" in host else host
    print(
        f"Approval inbox on http://{where}:{port}/ (API reference at /docs); Ctrl-C stops it.",
        file=sys.stderr,
    )
    if proxies:
        print(f"Believing X-Forwarded-Proto/-For from: {', '.join(sorted(proxies))}.", file=sys.stderr)
    if host in ("0.0.0.0", "::") and not settings.allowed_hosts:
        print(
            f"warning: --host {host} answers only to loopback names; add --allowed-host NAME for the "
            "name clients use (other Host headers get 400)",
            file=sys.stderr,
        )
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if count == 0:
        print("No approvers yet: add one with 'market-analyst approvers add NAME'.", file=sys.stderr)
    log_to_stderr()
    for store, problem in warm_up(settings).items():
        print(f"warning: {store}: {problem}", file=sys.stderr)
    run_server(settings, host, port)
