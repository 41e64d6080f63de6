"""system tests."""
