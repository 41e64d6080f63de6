"""Cold start: a user with no profile, on a terminal, is asked the profile's two questions once;
`--no-input` and a run that is not on a terminal keep the stated defaults. The terminal is a real
pseudo-terminal (`pty`) in front of a real `market-analyst` process."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time

from tests.support.cli import Cli, market_analyst_command


def _on_terminal(
    cli: Cli, args: list[str], answers: list[tuple[str, str]], timeout: float = 90, exit_code: int = 0
) -> str:
    """Run the CLI with a pseudo-terminal as stdin and stdout; answer each prompt (the text it waits
    for, the line to type) in turn, and return everything the terminal showed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*market_analyst_command(), *args],
        cwd=cli.cwd,
        env={**cli.env, "TERM": "dumb", "COLUMNS": "200"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    shown, pending, answered_at = b"", list(answers), 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            if pending and pending[0][0].encode() in shown[answered_at:]:
                os.write(leader, pending.pop(0)[1].encode() + b"\r")
                answered_at = len(shown)
            if proc.poll() is not None and not ready:
                break
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    text = shown.decode(errors="replace").replace("\r\n", "\n")
    assert proc.returncode == exit_code, text
    assert not pending, f"never asked {pending[0][0]!r}:\n{text}"
    return text


def _draft(cli: Cli, shown: str) -> dict:
    thread = next(line.split()[1] for line in shown.splitlines() if line.startswith("Thread "))
    return cli.ok("status", thread.rstrip(":"), "--json").json()["draft"]


def test_a_new_user_on_a_terminal_is_asked_once_and_the_answers_are_saved(cli: Cli):
    shown = _on_terminal(
        cli,
        ["analyze", "NVDA", "--user", "newcomer"],
        [("Risk tolerance", "conservative"), ("Horizon", "long"), ("Save these answers", "y")],
    )
    assert "No stored profile for user 'newcomer'" in shown and "Saved." in shown
    stored = cli.ok("profile", "show", "--user", "newcomer", "--json").json()
    assert (stored["source"], stored["profile"]["risk_tolerance"], stored["profile"]["horizon"]) == (
        "stored",
        "conservative",
        "long",
    )
    again = _on_terminal(cli, ["analyze", "NVDA", "--user", "newcomer"], [])
    assert "Risk tolerance" not in again  # asked once: the saved profile answers from now on


def test_answers_not_saved_are_used_for_this_run_only(cli: Cli):
    shown = _on_terminal(
        cli,
        ["analyze", "NVDA", "--user", "passerby"],
        [
            ("Risk tolerance", "bold"),
            ("Please answer", "aggressive"),
            ("Horizon", "short"),
            ("Save these answers", "n"),
        ],
    )
    assert "Not saved" in shown and "Please answer one of: conservative, moderate, aggressive" in shown
    assert cli.ok("profile", "show", "--user", "passerby", "--json").json()["source"] == "default"
    markdown = _draft(cli, shown)["markdown"]
    assert "- Chosen for this thread: horizon short, risk tolerance aggressive" in markdown
    # The profile line says what the thread used, not that it used the defaults it did not use.
    assert "used aggressive risk tolerance (chosen for this thread) and short horizon" in markdown
    assert "used the defaults" not in markdown


def test_no_input_and_a_pipe_keep_the_stated_defaults(cli: Cli):
    on_terminal = _on_terminal(cli, ["analyze", "NVDA", "--user", "quiet", "--no-input"], [])
    assert "Risk tolerance" not in on_terminal and "moderate risk tolerance" in on_terminal
    piped = cli.ok("analyze", "NVDA", "--user", "quiet")  # stdin is not a terminal here
    assert "Risk tolerance (" not in piped.stdout and "used the defaults" in piped.stdout
    assert cli.ok("profile", "show", "--user", "quiet", "--json").json()["source"] == "default"


def test_a_bad_ticker_fails_before_any_question_is_asked(cli: Cli):
    shown = _on_terminal(cli, ["analyze", "NV DA!", "--user", "hasty"], [], exit_code=2)
    assert "malformed ticker" in shown and "Risk tolerance" not in shown and "Traceback" not in shown
    assert cli.ok("profile", "show", "--user", "hasty", "--json").json()["source"] == "default"
