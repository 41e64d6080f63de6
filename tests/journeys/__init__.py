"""journeys tests."""
