"""Live prices through the optional `yfinance` extra (`pip install market-analyst-agent[live]`)."""

from __future__ import annotations

from market_analyst.errors import UserError
from market_analyst.market_data.base import PriceHistory


class YFinanceProvider:
    """Two years of daily adjusted closes; a clear error when the package or network is missing."""

    name = "yfinance"

    def load(self, ticker: str) -> PriceHistory:
        try:
            import yfinance
        except ImportError:
            raise UserError(
                "--data yfinance needs the live extra: pip install 'market-analyst-agent[live]'"
            ) from None
        symbol = "^GSPC" if ticker == "SPX" else ticker
        try:
            frame = yfinance.Ticker(symbol).history(period="2y", auto_adjust=True)
        except Exception as exc:  # the library raises many types for network failures
            raise UserError(f"yfinance could not fetch {ticker}: {exc}") from None
        if frame is None or frame.empty:
            raise UserError(f"yfinance returned no data for {ticker} (unknown symbol or no network)")
        dates = tuple(ts.date().isoformat() for ts in frame.index)
        closes = tuple(float(v) for v in frame["Close"])
        return PriceHistory(ticker=ticker, dates=dates, closes=closes, source="yfinance")

    def describe(self, as_of: str) -> str:
        return f"Yahoo Finance via yfinance, as of {as_of}"
