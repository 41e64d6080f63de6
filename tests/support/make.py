"""Run the README's `make` targets against the interpreter running the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import REPO
from tests.support.cli import clean_environ


def run_make(
    target: str,
    *variables: str,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    check: bool = True,
    cwd: Path = REPO,
) -> subprocess.CompletedProcess[str]:
    """`make TARGET` with this interpreter's environment as the venv (a `VENV=...` among `variables`
    overrides it), the repository's Makefile, run in `cwd`; with `check`, fails the test on a
    non-zero exit, showing the end of its output."""
    venv = Path(sys.executable).parent.parent
    result = subprocess.run(
        ["make", "-f", str(REPO / "Makefile"), target, f"VENV={venv}", *variables],
        cwd=cwd,
        env=env if env is not None else clean_environ(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result
