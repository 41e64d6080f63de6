"""What `records migrate`, run again, takes as erased in the database since its last copy
(`persistence.migrate.made_before`): a record missing there and made before that copy began."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from market_analyst.persistence.migrate import made_before

SINCE = datetime(2026, 12, 7, 10, 0, 0, 500_000, tzinfo=UTC)


def test_a_key_made_a_moment_before_the_last_copy_was_copied_then_so_missing_now_it_was_erased():
    older = made_before(SINCE)
    # A data key is dated to the microsecond: half a second before the copy began is before it.
    assert older((SINCE - timedelta(milliseconds=500)).isoformat(timespec="microseconds"))
    assert not older((SINCE + timedelta(microseconds=1)).isoformat(timespec="microseconds"))
    assert not older(SINCE.isoformat(timespec="microseconds"))


def test_a_record_dated_to_the_second_keeps_two_seconds_of_doubt():
    older = made_before(SINCE)
    assert not older((SINCE - timedelta(seconds=1)).isoformat(timespec="seconds"))  # maybe after it began
    assert older((SINCE - timedelta(seconds=3)).isoformat(timespec="seconds"))
    assert older("")  # a key made before keys were dated
    assert not older("not a time")
    assert not made_before(None)((SINCE - timedelta(days=1)).isoformat())  # a first copy erases nothing
