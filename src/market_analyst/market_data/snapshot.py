"""Real daily prices shipped inside the package (see data/market-snapshot/PROVENANCE.md)."""

from __future__ import annotations

from functools import cache
from importlib import resources

from market_analyst.errors import UserError
from market_analyst.market_data.base import PriceHistory, parse_price_csv

_PACKAGE_DIR = resources.files("market_analyst") / "data" / "market-snapshot"


def available_tickers() -> list[str]:
    """Tickers the bundled snapshot holds, sorted."""
    return sorted(p.name[:-4] for p in _PACKAGE_DIR.iterdir() if p.name.endswith(".csv"))


@cache
def _load(ticker: str) -> PriceHistory:
    resource = _PACKAGE_DIR / f"{ticker}.csv"
    return parse_price_csv(resource.read_text(encoding="utf-8"), ticker, "snapshot", f"snapshot {ticker}.csv")


class SnapshotProvider:
    """The default provider: needs no network and gives the same answer every time."""

    name = "snapshot"

    def load(self, ticker: str) -> PriceHistory:
        if ticker not in available_tickers():
            raise UserError(
                f"no data for ticker {ticker} in the bundled snapshot "
                f"(it holds {', '.join(available_tickers())}); use --data csv for your own files"
            )
        return _load(ticker)

    def describe(self, as_of: str) -> str:
        return f"bundled snapshot, as of {as_of}"
