"""What reaches the terminal: never a secret, never a raw control character from stored text.

`guard_output` wraps stdout and stderr for the whole command, so every line printed (results,
warnings, error lines, `--debug` tracebacks) passes through the same filter: the secret values the
settings hold are masked, and control characters are escaped when the stream is a terminal or the
text came from a store (drafts, notes, model text are data).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from market_analyst.formatting import printable
from market_analyst.redaction import SECRET_VARIABLES, URL_VARIABLES, scrub, secrets_in


class GuardedStream:
    """A text stream that masks `secrets` and escapes control characters in everything written."""

    def __init__(self, stream: TextIO, secrets: set[str]) -> None:
        self._stream = stream
        self._secrets = secrets

    def write(self, text: str) -> int:
        self._stream.write(printable(scrub(text, self._secrets)))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def settings_environment(
    environ: Mapping[str, str],
    dotenv: Path = Path(".env"),
    names: tuple[str, ...] = (*URL_VARIABLES, *SECRET_VARIABLES),
) -> dict[str, str]:
    """Some variables from `.env` overlaid by the environment (as Settings reads them), read without
    validating anything: the output filter must work even when the settings are bad. By default the
    variables that hold secrets."""
    values: dict[str, str] = {}
    if dotenv.is_file():
        try:
            from dotenv import dotenv_values

            values.update({k: v for k, v in dotenv_values(dotenv).items() if k in names and v})
        except (OSError, UnicodeDecodeError, ValueError):
            pass  # Settings reports an unreadable .env itself
    values.update({k: v for k, v in environ.items() if k in names})
    return values


def guard_output() -> None:
    """Replace stdout and stderr with guarded streams for the rest of the process."""
    secrets = secrets_in(settings_environment(os.environ))
    if not isinstance(sys.stdout, GuardedStream):
        sys.stdout = GuardedStream(sys.stdout, secrets)
    if not isinstance(sys.stderr, GuardedStream):
        sys.stderr = GuardedStream(sys.stderr, secrets)
