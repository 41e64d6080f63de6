"""The `market-analyst` command: a Typer app per command group, joined here.

Errors a user can cause (`UserError`, usage errors) become one line on stderr and exit code 2;
anything else is a bug: one line and exit code 1, or the traceback with `--debug`.
"""

from __future__ import annotations

import logging
import os
import sys

import typer

# typer 0.29+ vendors click, and only there are its usage errors reachable.
from typer._click.exceptions import ClickException, UsageError

from market_analyst.cli import approvers, db, profile, reports, runs, serve
from market_analyst.errors import UserError

app = typer.Typer(
    name="market-analyst",
    help="A market analyst whose reports wait for a person's approval before they are published.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
runs.register(app)
app.add_typer(reports.app, name="reports")
app.add_typer(db.app, name="db")
app.add_typer(profile.app, name="profile")
app.add_typer(approvers.app, name="approvers")
app.command()(serve.serve)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks of errors.", envvar="MA_DEBUG"),
) -> None:
    """Run `market-analyst COMMAND --help` for the options of a command."""


def _one_line(text: str) -> str:
    # Typer words a bad choice "Value error, 'x' is not one of ..."; the prefix says nothing to a user.
    return " ".join(text.replace("Value error, ", "").split())


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and map errors to one line and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("MA_DEBUG", "").lower() in ("1", "true", "yes")
    # Libraries log their own warnings (psycopg on a lost connection, for one); the error line below
    # says what happened, so they are shown only with --debug.
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    else:
        logging.getLogger().addHandler(logging.NullHandler())
    try:
        result = app(args=args, prog_name="market-analyst", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    except UsageError as exc:
        where = (
            f"market-analyst {exc.ctx.command_path.split(' ', 1)[1]}"
            if exc.ctx and " " in exc.ctx.command_path
            else "market-analyst"
        )
        print(f"error: {_one_line(exc.format_message())} (see '{where} --help')", file=sys.stderr)
        sys.exit(2)
    except ClickException as exc:
        print(f"error: {_one_line(exc.format_message())}", file=sys.stderr)
        sys.exit(exc.exit_code or 2)
    except UserError as exc:
        if debug:
            raise
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        if debug:
            raise
        print(
            f"internal error: {type(exc).__name__}: {_one_line(str(exc))} "
            "(run with --debug for the traceback)",
            file=sys.stderr,
        )
        sys.exit(1)
    sys.exit(result if isinstance(result, int) else 0)
