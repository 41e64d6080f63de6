"""Whether the stores answer, for `/healthz` and the check `serve` makes as it starts: each adapter
asked once, by its own check (`deps.store_checks`). No graph is compiled and no other adapter is built."""

from __future__ import annotations

from market_analyst.deps import store_checks
from market_analyst.errors import ServiceUnavailable, UserError
from market_analyst.settings import Settings


def check_stores(settings: Settings) -> dict[str, str]:
    """ "ok", or one line saying what is wrong, for the checkpointer, the profile store, the archive and
    (with `MA_RECORDS=postgres`) the records database."""
    results: dict[str, str] = {}
    for name, check in store_checks(settings).items():
        try:
            results[name] = check()
        except (UserError, ServiceUnavailable) as exc:
            results[name] = str(exc)
    return results
