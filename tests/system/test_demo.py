"""`make demo`, exactly as the README names it, on a fresh data directory with the embedded
PostgreSQL: it publishes one report and ends with what to do next, every command of which works;
and `make clean`, which stops that server before it removes the environment its binary lives in."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.support import REPO
from tests.support.cli import Cli, clean_environ, market_analyst_command
from tests.support.crashkit import Harness
from tests.support.make import run_make
from tests.support.services import discard_embedded_postgres


def _next_steps(stdout: str) -> list[str]:
    """The commands the demo's last section suggests, as it prints them."""
    section = stdout.split("\n== What next\n", 1)[1]
    return [line.split("#")[0].strip() for line in section.splitlines() if line.startswith("  ")]


def _comparable(line: str, data_dir: str) -> str:
    """A line of demo output without what differs from run to run: thread IDs, archive keys, paths."""
    line = line.replace(data_dir, "DATA").replace("MA_DATA_DIR=DATA ", "")
    line = re.sub(r"[^\s(]*/\.market-analyst", "DATA", line)
    line = re.sub(r"[^\s(]*/bin/market-analyst", "market-analyst", line)
    line = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "THREAD", line)
    line = re.sub(r"NVDA-2025-02-14-[0-9a-f]{16}", "KEY", line)
    return line.replace("    (make clean stops it too)", "")  # printed for the default data dir only


def _readme_lines_not_printed(stdout: str, data_dir: Path) -> list[str]:
    """The lines of the README's trimmed demo output that the demo did not print."""
    printed = {_comparable(line, str(data_dir)) for line in stdout.splitlines()}
    readme = (REPO / "README.md").read_text()
    excerpt = readme.split("## What you get\n", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    shown = [line for line in excerpt.splitlines() if line.strip() not in ("", "...")]
    assert len(shown) > 20
    return [line for line in shown if _comparable(line, str(data_dir)) not in printed]


def test_make_demo_publishes_one_report_and_says_what_to_do_next(tmp_path: Path):
    data_dir = tmp_path / "demo-data"
    env = clean_environ() | {"MA_DATA_DIR": str(data_dir)}
    try:
        result = run_make("demo", env=env, timeout=300)
        assert "approve it from a second process" in result.stdout
        assert "INFO:" not in result.stdout + result.stderr  # no library's chatter (the embedded server's)
        assert "msgpack allowlist" not in result.stdout + result.stderr
        assert not _readme_lines_not_printed(result.stdout, data_dir)  # the README shows real output
        [path] = list((data_dir / "reports").glob("*.json"))
        document = json.loads(path.read_text())
        assert "bundled snapshot, as of 2025-02-14" in document["markdown"]
        assert document["report"]["data_source"] == "bundled snapshot, as of 2025-02-14"
        assert (data_dir / "postgres" / "PG_VERSION").exists()  # the embedded server, in the data dir

        assert f"The report is {path}." in result.stdout
        assert "The embedded PostgreSQL keeps running" in result.stdout
        steps = _next_steps(result.stdout)
        assert steps[0].endswith(f"market-analyst reports show {document['key']}")
        assert steps[1].endswith("market-analyst threads")
        # Each suggestion works as printed, from where `make demo` ran.
        shown, threads = (
            subprocess.run(
                s, shell=True, cwd=REPO, env=clean_environ(), capture_output=True, text=True, timeout=120
            )
            for s in steps[:2]
        )
        assert shown.returncode == 0 and "Educational software, not investment advice." in shown.stdout
        assert threads.returncode == 0 and document["thread_id"] in threads.stdout
        stop = result.stdout.split("Stop it with: ", 1)[1].splitlines()[0].strip()
        assert subprocess.run(stop, shell=True, cwd=REPO, env=clean_environ(), timeout=120).returncode == 0
        assert Cli(env=env, cwd=tmp_path).ok("db", "status", "--json").json()["running"] is False
    finally:
        discard_embedded_postgres(data_dir / "postgres")


def test_make_clean_stops_the_embedded_postgres_first_and_never_fails_when_none_runs(
    tmp_path: Path, harness: Harness
):
    """Run in a checkout of its own: the repository's Makefile, a stand-in venv, the default data dir."""
    checkout = tmp_path / "checkout"
    (checkout / "venv" / "bin").mkdir(parents=True)
    (checkout / "venv" / "bin" / "market-analyst").symlink_to(market_analyst_command()[0])
    (checkout / ".cache").mkdir()
    cli = Cli(env=clean_environ(), cwd=checkout, harness=harness)  # MA_DATA_DIR unset: ./.market-analyst
    try:
        cli.ok("analyze", "NVDA")
        assert cli.ok("db", "status", "--json").json()["running"] is True

        cleaned = run_make("clean", "VENV=venv", cwd=checkout)
        assert "Stopped the embedded PostgreSQL" in cleaned.stdout
        assert cli.ok("db", "status", "--json").json()["running"] is False
        assert not (checkout / "venv").exists() and not (checkout / ".cache").exists()
        assert (checkout / ".market-analyst" / "postgres" / "PG_VERSION").exists()  # the data is kept

        run_make("clean", "VENV=venv", cwd=checkout)  # no venv, nothing running
        (checkout / "venv" / "bin").mkdir(parents=True)
        (checkout / "venv" / "bin" / "market-analyst").symlink_to(market_analyst_command()[0])
        again = run_make("clean", "VENV=venv", cwd=checkout)  # a venv, nothing running
        assert "No embedded PostgreSQL runs" in again.stdout
    finally:
        discard_embedded_postgres(checkout / ".market-analyst" / "postgres")
