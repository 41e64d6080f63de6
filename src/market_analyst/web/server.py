"""`market-analyst serve`: the app on uvicorn, on loopback unless told otherwise."""

from __future__ import annotations

import ipaddress
import logging

from market_analyst.errors import UserError
from market_analyst.settings import Settings
from market_analyst.web import actions


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (127.0.0.0/8, ::1 or localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(settings: Settings, host: str, allow_remote: bool) -> int:
    """Refuse an address other machines can reach unless `allow_remote` and an approver exists;
    returns how many approvers there are."""
    count = len(actions.approvers(settings).list())
    if not is_loopback(host):
        if not allow_remote:
            raise UserError(
                f"--host {host} can be reached from other machines; add --allow-remote to mean it "
                "(and put TLS in front: sign-in tokens and cookies would cross the network)"
            )
        if count == 0:
            raise UserError(
                "--allow-remote needs at least one approver first: market-analyst approvers add NAME"
            )
    return count


def log_to_stderr() -> None:
    """The server's log, on stderr: this program's lines from INFO (a thread the finisher published,
    where the embedded PostgreSQL runs), every library's from WARNING; uvicorn writes the one line per
    request (see `security`). The command line sends libraries' logging nowhere (`cli.main`); a server
    is watched through its log, so it says what it does. Left alone under `--debug`, which logs all."""
    root = logging.getLogger()
    if any(not isinstance(handler, logging.NullHandler) for handler in root.handlers):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("market_analyst").setLevel(logging.INFO)


def warm_up(settings: Settings) -> dict[str, str]:
    """Check every store once before serving: it starts the embedded PostgreSQL now rather than in
    the first requests at once, and says early what does not answer (requests then get 503)."""
    return {store: result for store, result in actions.health(settings).items() if result != "ok"}


def serve(settings: Settings, host: str, port: int) -> None:
    """Run the server until interrupted: one line of log per request (the app writes it, with the
    reason for a refusal), and connections whose request does not arrive in time dropped."""
    from market_analyst.workflow.finishing import Finisher
    from market_analyst.workflow.notifications import background_worker

    Finisher(settings).start()  # approved threads whose publication was cut short are finished
    worker = background_worker(settings)  # delivers events, when a webhook is configured
    try:
        _run(settings, host, port)
    finally:
        if worker is not None:
            worker.stop()


def _run(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    from market_analyst.web.app import create_app
    from market_analyst.web.timeouts import bounded_protocol

    uvicorn.run(
        create_app(settings, bind=host),
        host=host,
        port=port,
        log_level="info",
        access_log=False,
        server_header=False,
        proxy_headers=False,  # the app believes forwarding headers from trusted proxies only
        http=bounded_protocol(settings.request_timeout),
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=16 * 1024,  # the request line and headers together
    )
