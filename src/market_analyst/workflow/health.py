"""Whether the stores answer, for `/healthz` and the check `serve` makes as it starts: each adapter
asked once, by its own check. No graph is compiled and no other adapter is built."""

from __future__ import annotations

from market_analyst.deps import open_approvers, open_archive, open_checkpointer, open_profiles
from market_analyst.errors import ServiceUnavailable, UserError
from market_analyst.settings import Settings


def check_stores(settings: Settings) -> dict[str, str]:
    """ "ok", or one line saying what is wrong, for the checkpointer, the profile store, the archive and
    (with `MA_RECORDS=postgres`) the records database."""
    results: dict[str, str] = {}
    try:
        with open_checkpointer(settings):  # opened is answering: connected, and its tables set up
            results["checkpointer"] = "ok"
    except (UserError, ServiceUnavailable) as exc:
        results["checkpointer"] = str(exc)
    try:
        open_profiles(settings).get("health-check")
        results["profiles"] = "ok"
    except (UserError, ServiceUnavailable) as exc:
        results["profiles"] = str(exc)
    try:
        results["archive"] = open_archive(settings).check()
    except (UserError, ServiceUnavailable) as exc:
        results["archive"] = str(exc)
    if settings.records == "postgres":  # the approvers, sessions and audit log, apart from the archive
        try:
            open_approvers(settings).list()
            results["records"] = "ok"
        except (UserError, ServiceUnavailable) as exc:
            results["records"] = str(exc)
    return results
