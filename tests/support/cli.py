"""The real `market-analyst` command, run in child processes with a test's own settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import REPO
from tests.support.crashkit import Harness

# Variables the application reads; stripped from the environment the tests inherit.
_APP_VARS = ("MA_", "POSTGRES_URL", "REDIS_URL", "QDRANT_", "SOURCE_DATE_EPOCH", "OPENAI_")


def clean_environ() -> dict[str, str]:
    """The process environment without any of the application's own settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_APP_VARS)}


def market_analyst_command() -> list[str]:
    """The installed console script of the interpreter running the tests."""
    script = Path(sys.executable).parent / "market-analyst"
    return [str(script)] if script.exists() else [sys.executable, "-m", "market_analyst"]


def unique_id(name: str) -> str:
    """A thread ID that no other test (nor an earlier session on a kept Redis) has used."""
    return f"{name}-{uuid.uuid4().hex[:12]}"


@dataclass
class Result:
    """A finished CLI process."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@dataclass
class Cli:
    """Runs `market-analyst` in a child process with this test's settings: forked from the session's
    pre-imported fork server when `harness` is set (a fraction of a second a command), else a new
    interpreter running the installed console script."""

    env: dict[str, str]
    cwd: Path
    harness: Harness | None = None
    calls: list[list[str]] = field(default_factory=list)

    def run(self, *args: str, extra_env: dict[str, str] | None = None, timeout: float = 120) -> Result:
        self.calls.append(list(args))
        env = {**self.env, **(extra_env or {})}
        if self.harness is not None:
            outcome = self.harness.run(list(args), env, timeout=timeout, cwd=self.cwd)
            return Result(outcome.returncode, outcome.stdout, outcome.stderr)
        proc = subprocess.run(
            [*market_analyst_command(), *args],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def ok(self, *args: str, **kwargs: Any) -> Result:
        result = self.run(*args, **kwargs)
        assert result.returncode == 0, f"{args} failed ({result.returncode}): {result.stderr}"
        return result

    def fails(self, *args: str, **kwargs: Any) -> Result:
        """Run a command that must fail with exactly one line on stderr and no traceback."""
        result = self.run(*args, **kwargs)
        assert result.returncode != 0, f"{args} should have failed: {result.stdout}"
        assert "Traceback" not in result.stderr, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got: {result.stderr!r}"
        return result

    @property
    def data_dir(self) -> Path:
        return Path(self.env["MA_DATA_DIR"])

    def archive_files(self) -> list[Path]:
        """The documents in this CLI's archive, by name."""
        return sorted((self.data_dir / "reports").glob("*.json"))


def run_with_kill(cli: Cli, kill_point: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a child process that SIGKILLs itself at `kill_point`."""
    return subprocess.run(
        [sys.executable, "-m", "tests.support.crash_child", kill_point, *args],
        cwd=REPO,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
