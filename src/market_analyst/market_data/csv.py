"""A directory of the user's own `TICKER.csv` files, in the snapshot's columns."""

from __future__ import annotations

from pathlib import Path

from market_analyst.errors import UserError
from market_analyst.market_data.base import COLUMNS, PriceHistory, parse_price_csv


class CsvDirectoryProvider:
    """Reads `<directory>/<TICKER>.csv`; the ticker is validated before it becomes a file name."""

    name = "csv"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def load(self, ticker: str) -> PriceHistory:
        path = self.directory / f"{ticker}.csv"
        if not path.is_file():
            raise UserError(f"no data for ticker {ticker}: {path} does not exist")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UserError(f"{path} is not a UTF-8 text file of prices ({','.join(COLUMNS)})") from None
        return parse_price_csv(text, ticker, f"csv {path}", str(path))

    def describe(self, as_of: str) -> str:
        return f"CSV files in {self.directory}, as of {as_of}"
