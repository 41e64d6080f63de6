"""Options and rendering shared by the command groups."""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from market_analyst.settings import Settings

_C1 = re.compile(r"[\x7f-\x9f]")
JSON_OPTION = typer.Option(False, "--json", help="Print one JSON object instead of text.")


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment and `.env`, with the command's options applied (Typer has
    already checked each option against the setting's type)."""
    from market_analyst.settings import Settings

    return Settings.load().with_overrides(**overrides)


def emit_json(data: Any) -> None:
    """Print `data` as one JSON document on stdout. JSON escapes C0 controls itself; DEL and the C1
    controls are escaped here too (as \\u escapes), so the text stays valid JSON and inert on a terminal."""
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)
    print(_C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def announcer() -> Any:
    """Say which draft a decision is about to be made on (what `--draft` would pin), on stdout with
    what the command then did, so that an error stays the one line on stderr."""

    def say(text: str) -> None:
        print(text, flush=True)

    return say


def progress_printer() -> Any:
    """A progress callback for a terminal (each finished node, what a long step waits for), and
    nothing otherwise."""
    if not sys.stderr.isatty():
        return None

    def show(event: str) -> None:
        print(f"  {event}", file=sys.stderr)

    return show
