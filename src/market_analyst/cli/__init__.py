"""The `market-analyst` command: a Typer app per command group, joined here.

Errors a user can cause (`UserError`, usage errors) become one line on stderr and exit code 2; a
service that is unavailable exits 69; anything else is a bug and exits 1. `--debug` (anywhere on
the line) adds the traceback before that line and keeps the code. A command group given no
command is not a mistake: it prints its help on stdout and exits 0.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import traceback
import warnings
from typing import NoReturn, cast

import typer
import typer.main

# typer 0.29+ vendors click, and only there are its usage errors reachable.
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from market_analyst.cli import (
    approvers,
    audit,
    db,
    memories,
    notifications,
    operate,
    profile,
    records,
    reports,
    runs,
    serve,
)
from market_analyst.cli.output import guard_output
from market_analyst.errors import USER_ERROR_EXIT, RunStopped, ServiceUnavailable, UserError

app = typer.Typer(
    name="market-analyst",
    help="A market analyst whose reports wait for a person's approval before they are published.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Typer's own --install-completion and --show-completion; the shell calls the program back with
    # _MARKET_ANALYST_COMPLETE set, which Typer answers before any command runs.
    add_completion=True,
    rich_markup_mode=None,
)
runs.register(app)
operate.register(app)
app.add_typer(reports.app, name="reports")
app.add_typer(db.app, name="db")
app.add_typer(profile.app, name="profile")
app.command()(memories.remember)
app.add_typer(memories.app, name="memories")
app.add_typer(approvers.app, name="approvers")
app.add_typer(audit.app, name="audit")
app.add_typer(records.app, name="records")
app.command()(serve.serve)
app.command()(notifications.worker)
app.add_typer(notifications.app, name="notifications")


@functools.cache
def command() -> TyperGroup:
    """The app as a Click command, built once a process: Typer builds it on every call of `app`,
    reading every command's signature (about 10 ms), and a process forked from one that has built it
    (the tests' CLI harness) need not build it again."""
    return cast(TyperGroup, typer.main.get_command(app))


def package_version() -> str:
    """The installed package's version, from its metadata (pyproject.toml's `version`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("market-analyst-agent")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        print(f"market-analyst {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(
        False, "--debug", help="Show the traceback behind an error (anywhere on the line).", envvar="MA_DEBUG"
    ),
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
    ),
) -> None:
    """Run `market-analyst COMMAND --help` for the options of a command."""


def _one_line(text: str) -> str:
    # Typer words a bad choice "Value error, 'x' is not one of ..."; the prefix says nothing to a user.
    return " ".join(text.replace("Value error, ", "").split())


def _debug_requested(args: list[str]) -> bool:
    """`--debug` anywhere on the line, or MA_DEBUG set true (in the environment or `.env`)."""
    from market_analyst.cli.output import settings_environment

    flag = os.environ.get("MA_DEBUG") or settings_environment(os.environ, names=("MA_DEBUG",)).get(
        "MA_DEBUG", ""
    )
    return "--debug" in args or flag.strip().lower() in ("1", "true", "yes", "on")


def _fail(message: str, code: int, debug: bool) -> NoReturn:
    """Print the error as one line (after the traceback with --debug) and exit with `code`."""
    if debug:
        traceback.print_exc()
    print(message, file=sys.stderr)
    sys.exit(code)


def _usage_line(exc: UsageError) -> str:
    where = (
        f"market-analyst {exc.ctx.command_path.split(' ', 1)[1]}"
        if exc.ctx and " " in exc.ctx.command_path
        else "market-analyst"
    )
    return f"error: {_one_line(exc.format_message())} (see '{where} --help')"


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and map errors to one line and an exit code (see errors.py);
    `--debug` adds the traceback and never changes the code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = _debug_requested(args)
    args = [a for a in args if a != "--debug"]
    guard_output()
    # Libraries log and warn on their own (psycopg on a lost connection, qdrant-client on an API key
    # over http); the one error line says what happened, so they are shown only with --debug.
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    else:
        logging.getLogger().addHandler(logging.NullHandler())
        warnings.simplefilter("ignore")
    try:
        result = command()(args=args, prog_name="market-analyst", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _fail("error: aborted", 130, debug)
    except NoArgsIsHelpError as exc:
        # `market-analyst` or `market-analyst reports` alone asks what there is: the help, as --help.
        print(exc.ctx.get_help() if exc.ctx else exc.format_message())
        sys.exit(0)
    except UsageError as exc:
        _fail(_usage_line(exc), USER_ERROR_EXIT, debug)
    except ClickException as exc:
        _fail(f"error: {_one_line(exc.format_message())}", exc.exit_code or USER_ERROR_EXIT, debug)
    except (UserError, ServiceUnavailable, RunStopped) as exc:
        _fail(f"error: {_one_line(str(exc))}", exc.exit_code, debug)
    except KeyboardInterrupt:
        _fail("error: interrupted", 130, debug)
    except Exception as exc:
        hint = "" if debug else " (run with --debug for the traceback)"
        _fail(f"internal error: {type(exc).__name__}: {_one_line(str(exc))}{hint}", 1, debug)
    sys.exit(result if isinstance(result, int) else 0)
