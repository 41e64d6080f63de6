"""Price histories behind one small protocol: the bundled snapshot, a CSV directory, or yfinance."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from market_analyst.errors import UserError
from market_analyst.market_data.base import MarketDataProvider, PriceHistory

if TYPE_CHECKING:
    from market_analyst.settings import Settings

__all__ = ["MarketDataProvider", "PriceHistory", "normalize_ticker", "open_provider", "BENCHMARK"]

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


def open_provider(settings: Settings) -> MarketDataProvider:
    """The provider `settings.market_data` selects."""
    if settings.market_data == "snapshot":
        from market_analyst.market_data.snapshot import SnapshotProvider

        return SnapshotProvider()
    if settings.market_data == "csv":
        from market_analyst.market_data.csv import CsvDirectoryProvider

        if settings.csv_dir is None:
            raise UserError("--data csv needs MA_CSV_DIR: a directory of TICKER.csv files")
        return CsvDirectoryProvider(settings.csv_dir)
    from market_analyst.market_data.yfinance import YFinanceProvider

    return YFinanceProvider()
