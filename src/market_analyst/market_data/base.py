"""The price history every provider returns, and the CSV format they read."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from datetime import date

from market_analyst.errors import UserError

COLUMNS = ("date", "open", "high", "low", "close", "adj_close", "volume")


@dataclass(frozen=True)
class PriceHistory:
    """Daily adjusted closes of one ticker, ascending by date. Never stored in the graph state."""

    ticker: str
    dates: tuple[str, ...]
    closes: tuple[float, ...]
    source: str

    @property
    def as_of(self) -> str:
        """The last trading day in the series (ISO date)."""
        return self.dates[-1]


def parse_price_csv(text: str, ticker: str, source: str, origin: str) -> PriceHistory:
    """Parse `date,open,high,low,close,adj_close,volume` rows; `origin` names the file in errors."""
    try:
        return _parse(csv.DictReader(io.StringIO(text)), ticker, source, origin)
    except csv.Error as exc:
        raise UserError(f"{origin}: not a CSV file of prices ({exc})") from None


def _parse(reader: csv.DictReader[str], ticker: str, source: str, origin: str) -> PriceHistory:
    missing = [c for c in ("date", "adj_close") if c not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"{origin}: missing column(s) {', '.join(missing)}; expected {','.join(COLUMNS)}")
    dates: list[str] = []
    closes: list[float] = []
    for line_no, row in enumerate(reader, start=2):
        try:
            day = date.fromisoformat(row["date"]).isoformat()
            close = float(row["adj_close"])
        except (TypeError, ValueError):
            shown = repr(row)
            shown = shown if len(shown) <= 120 else shown[:120] + "..."
            raise UserError(f"{origin}, line {line_no}: not a date and a price: {shown}") from None
        if not (close > 0 and math.isfinite(close)):
            raise UserError(f"{origin}, line {line_no}: adj_close must be positive, got {close}")
        if dates and day <= dates[-1]:
            raise UserError(f"{origin}, line {line_no}: dates must ascend ({day} after {dates[-1]})")
        dates.append(day)
        closes.append(close)
    if len(dates) < 2:
        raise UserError(f"{origin}: needs at least two daily prices, found {len(dates)}")
    return PriceHistory(ticker=ticker, dates=tuple(dates), closes=tuple(closes), source=source)
