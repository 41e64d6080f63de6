"""Price histories: the bundled snapshot, a CSV directory, or yfinance (`deps.open_market_data`
chooses), each satisfying `ports.MarketDataProvider`."""

from __future__ import annotations

import re

from market_analyst.errors import UserError
from market_analyst.market_data.base import PriceHistory

__all__ = ["PriceHistory", "normalize_ticker", "BENCHMARK"]

# Letters, digits, '.', '-' and '^' (index symbols); at most 10 characters. Enough for every listed
# symbol format we read, and nothing that can name a path.
_TICKER = re.compile(r"^\^?[A-Z0-9][A-Z0-9.\-]{0,9}$")

BENCHMARK = "SPX"


def normalize_ticker(raw: str) -> str:
    """Upper-case and validate a ticker symbol, or raise `UserError`."""
    ticker = raw.strip().upper()
    if not ticker:
        raise UserError("ticker is empty: give a symbol such as NVDA")
    if not _TICKER.fullmatch(ticker) or ".." in ticker:
        shown = raw if len(raw) <= 20 else raw[:20] + "..."
        raise UserError(
            f"malformed ticker {shown!r}: use 1-10 letters, digits, '.' or '-' (for example NVDA or BRK-B)"
        )
    return ticker
