"""Options and rendering shared by the command groups."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from market_analyst.errors import UserError
from market_analyst.settings import CHECKPOINTERS, DURABILITY_MODES, MARKET_DATA_KINDS, Settings

JSON_OPTION = typer.Option(False, "--json", help="Print one JSON object instead of text.")


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment and `.env`, with the command's options applied."""
    allowed = {
        "durability": DURABILITY_MODES,
        "checkpointer": CHECKPOINTERS,
        "market_data": MARKET_DATA_KINDS,
    }
    for name, choices in allowed.items():
        value = overrides.get(name)
        if value is not None and value not in choices:
            option = "--data" if name == "market_data" else f"--{name}"
            raise UserError(f"{option} {value!r} is not one of: {', '.join(choices)}")
    return Settings.load().with_overrides(**overrides)


def emit_json(data: Any) -> None:
    """Print `data` as one JSON document on stdout."""
    print(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


def progress_printer() -> Any:
    """A progress callback that names each finished node on a terminal, and stays quiet otherwise."""
    if not sys.stderr.isatty():
        return None

    def show(node: str) -> None:
        print(f"  done: {node}", file=sys.stderr)

    return show
