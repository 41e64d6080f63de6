"""A type no checkpoint of the application holds, planted by a test to show strict deserialisation
refusing it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Planted:
    """Anything that is not in the state's allow-list."""

    payload: str
