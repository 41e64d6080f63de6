"""A type no checkpoint of the application holds, planted by a test to show strict deserialisation
refusing it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass
class Planted:
    """Anything that is not in the state's allow-list."""

    payload: str


class PlantedTime(datetime):
    """A time whose class is not LangGraph's: stored as a call of its `fromisoformat`, a method outside
    the allow-list."""
