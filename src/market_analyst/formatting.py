"""How figures are written in drafts and on the terminal, in one place."""

from __future__ import annotations

from typing import Any


def signed_pct(value: Any) -> str:
    """A fraction as a signed percentage with one decimal ("+92.6%"), or "n/a"."""
    return "n/a" if value is None else f"{float(value) * 100:+.1f}%"


def pct(value: Any) -> str:
    """A fraction as a percentage with one decimal ("56.8%"), or "n/a"."""
    return "n/a" if value is None else f"{float(value) * 100:.1f}%"
