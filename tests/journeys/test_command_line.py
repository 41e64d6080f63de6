"""What a newcomer meets first on the command line: help when nothing is given, `--version`, shell
completion, and `--debug` anywhere on the line (a traceback added, the exit code kept)."""

from __future__ import annotations

import shlex
import subprocess
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli import Cli, clean_environ, market_analyst_command

GROUPS = ["reports", "profile", "memories", "db", "approvers", "audit", "notifications"]


def test_the_program_alone_prints_its_help(cli: Cli):
    result = cli.ok()
    assert result.stdout.startswith("Usage: market-analyst [OPTIONS] COMMAND [ARGS]...")
    assert "\nCommands:\n" in result.stdout and "\n  analyze " in result.stdout
    assert len(result.stdout.splitlines()) > 20 and not result.stderr


@pytest.mark.parametrize("group", GROUPS)
def test_a_command_group_alone_prints_its_help(cli: Cli, group: str):
    result = cli.ok(group)
    assert result.stdout.startswith(f"Usage: market-analyst {group} [OPTIONS] COMMAND [ARGS]...")
    assert "\nCommands:\n" in result.stdout and len(result.stdout.splitlines()) > 5
    assert not result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("reports", "bogus"), "No such command 'bogus'"),
        (("--bogus",), "No such option: --bogus"),
        (("analyze",), "Missing argument 'ticker'"),
        (("profile", "show", "--user"), "requires an argument"),
    ],
)
def test_real_mistakes_stay_one_line_with_exit_2(cli: Cli, args: tuple[str, ...], needle: str):
    result = cli.fails(*args)
    assert result.returncode == 2 and needle in result.stderr and not result.stdout


def test_version_is_the_package_version(cli: Cli):
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert version("market-analyst-agent") == declared
    assert cli.ok("--version").stdout == f"market-analyst {declared}\n"


def _in_bash(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`command` run by bash (not exec'd by it), so the program's parent process is a bash shell."""
    return subprocess.run(
        ["bash", "-c", f"{command}; exit $?"], env=env, capture_output=True, text=True, timeout=120
    )


def test_show_completion_prints_the_bash_script(tmp_path: Path):
    program = shlex.join(market_analyst_command())
    result = _in_bash(f"{program} --show-completion", clean_environ() | {"HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "_MARKET_ANALYST_COMPLETE=complete_bash" in result.stdout
    assert "complete -o default -F _market_analyst_completion market-analyst" in result.stdout


def test_the_shell_gets_completions_through_the_guarded_output(cli: Cli):
    asked = {
        "_MARKET_ANALYST_COMPLETE": "complete_bash",
        "COMP_WORDS": "market-analyst rep",
        "COMP_CWORD": "1",
    }
    assert cli.ok(extra_env=asked).stdout.split() == ["reports"]
    asked |= {"COMP_WORDS": "market-analyst reports s", "COMP_CWORD": "2"}
    assert cli.ok(extra_env=asked).stdout.split() == ["search", "show"]


def test_install_completion_makes_bash_complete_commands(tmp_path: Path):
    """As docs/command-line.md says: install it, open a new bash, and TAB completes the commands."""
    program = market_analyst_command()
    env = clean_environ() | {"HOME": str(tmp_path), "PATH": f"{Path(program[0]).parent}:/usr/bin:/bin"}
    installed = _in_bash("market-analyst --install-completion", env)
    assert installed.returncode == 0, installed.stderr
    assert "bash completion installed in" in installed.stdout
    script = tmp_path / ".bash_completions" / "market-analyst.sh"
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    # What bash does on TAB after `market-analyst pro`: call the function the script registered.
    tab = (
        f"source {shlex.quote(str(script))}; COMP_WORDS=(market-analyst pro); COMP_CWORD=1; "
        'COMPREPLY=(); _market_analyst_completion market-analyst; echo "${COMPREPLY[@]}"'
    )
    completed = _in_bash(tab, env)
    assert completed.stdout.split() == ["profile"], completed.stderr


@pytest.mark.parametrize(
    "args",
    [("--debug", "analyze", "NV$DA"), ("analyze", "NV$DA", "--debug"), ("analyze", "--debug", "NV$DA")],
)
def test_debug_anywhere_adds_the_traceback_and_keeps_exit_2(cli: Cli, args: tuple[str, ...]):
    result = cli.run(*args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert result.stderr.rstrip().splitlines()[-1].startswith("error: malformed ticker 'NV$DA'")


def test_without_debug_the_error_is_one_line(cli: Cli):
    result = cli.fails("analyze", "NV$DA")
    assert result.returncode == 2 and result.stderr.startswith("error: malformed ticker 'NV$DA'")


def test_ma_debug_in_the_environment_or_dotenv_adds_the_traceback(cli: Cli):
    from_env = cli.run("analyze", "NV$DA", extra_env={"MA_DEBUG": "1"})
    assert from_env.returncode == 2 and "Traceback" in from_env.stderr
    (cli.cwd / ".env").write_text("MA_DEBUG=true\n")
    from_dotenv = cli.run("analyze", "NV$DA")
    assert from_dotenv.returncode == 2 and "Traceback" in from_dotenv.stderr


def test_debug_keeps_the_exit_code_of_an_unavailable_service(cli: Cli):
    down = {"POSTGRES_URL": "postgresql://analyst:secret@127.0.0.1:9/markets"}
    plain = cli.fails("analyze", "NVDA", extra_env=down)
    debugged = cli.run("analyze", "NVDA", "--debug", extra_env=down)
    assert plain.returncode == debugged.returncode == 69
    assert "Traceback" in debugged.stderr and "secret" not in debugged.stderr
