"""Analysts turn computed metrics and a risk profile into a recommendation."""
