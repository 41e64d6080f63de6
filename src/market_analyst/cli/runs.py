"""Commands that start, decide and inspect runs: analyze, approve, reject, revise, resume, status, threads."""

from __future__ import annotations

import sys
from typing import Any

import typer

from market_analyst.choices import CheckpointerKind, Durability, Horizon, MarketDataKind, RiskTolerance
from market_analyst.cli.common import JSON_OPTION, announcer, emit_json, load_settings, progress_printer
from market_analyst.cli.render import (
    render_approval,
    render_revision,
    render_view,
    show,
    stops_as_json,
    thread_json,
)
from market_analyst.errors import UserError

DURABILITY_HELP = "When checkpoints are written: sync (default), async or exit. Env: MA_DURABILITY."
CHECKPOINTER_HELP = "postgres (default) or redis. Env: MA_CHECKPOINTER."
DATA_HELP = "Market data: snapshot (default), csv or yfinance. Env: MA_MARKET_DATA."
USER_HELP = "Whose profile and name to use (scoping for a local tool, not authentication). Env: MA_USER."


def analyze(
    ticker: str = typer.Argument(..., help="Ticker symbol, for example NVDA."),
    question: str = typer.Option("", "--question", "-q", help="What the report should answer."),
    user: str = typer.Option(None, "--user", help=USER_HELP),
    thread_id: str = typer.Option(None, "--thread-id", help="Use this thread ID instead of a new one."),
    durability: Durability | None = typer.Option(None, "--durability", help=DURABILITY_HELP),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    data: MarketDataKind | None = typer.Option(None, "--data", help=DATA_HELP),
    no_input: bool = typer.Option(
        False, "--no-input", help="Ask nothing: a user without a profile gets the stated defaults."
    ),
    json_output: bool = JSON_OPTION,
) -> None:
    """Analyse TICKER and stop before publishing, printing the thread ID and how to approve it.
    On a terminal, a user without a stored profile is first asked its two questions."""
    from market_analyst.workflow import start_analysis

    settings = load_settings(durability=durability, checkpointer=checkpointer, market_data=data)
    answers = None
    if not (no_input or json_output) and sys.stdin.isatty() and sys.stdout.isatty():
        from market_analyst.market_data import normalize_ticker

        normalize_ticker(ticker)  # a bad ticker fails before any question is asked or answer saved
        answers = ask_profile(settings, user)
    with stops_as_json(json_output):
        view = start_analysis(
            settings,
            ticker,
            question=question,
            user=user,
            thread_id=thread_id,
            progress=None if json_output else progress_printer(),
            profile_answers=answers,
        )
    show(view, json_output)


def _choose(question: str, choices: tuple[str, ...], default: str) -> str:
    while True:
        answer = typer.prompt(f"{question} ({', '.join(choices)})", default=default).strip().lower()
        if answer in choices:
            return answer
        print(f"  Please answer one of: {', '.join(choices)}.")


def ask_profile(settings: Any, user: str | None) -> dict[str, str] | None:
    """The first-run questions: a user with no stored profile, on a terminal, is asked the profile's
    two questions; the answers are saved as the profile if the user says so (then never asked again),
    else used for this run only. None when a profile is stored (nothing is asked)."""
    from market_analyst.state import HORIZONS, RISK_TOLERANCES
    from market_analyst.workflow.stores import set_profile, show_profile

    used = show_profile(settings, user)
    if used.source == "stored":
        return None
    who = used.profile.user_id
    print(f"No stored profile for user {who!r}: two questions (Enter keeps the default).")
    try:
        risk = _choose("Risk tolerance", RISK_TOLERANCES, used.profile.risk_tolerance)
        horizon = _choose("Horizon", HORIZONS, used.profile.horizon)
        save = typer.confirm(f"Save these answers as the profile of {who!r}?", default=True)
    except typer.Abort:  # end of input (Ctrl-D) or Ctrl-C at a question
        raise UserError("analyze stopped at the profile questions: nothing was run") from None
    answers = {"risk_tolerance": risk, "horizon": horizon}
    if save:
        set_profile(settings, who, risk_tolerance=risk, horizon=horizon)  # type: ignore[arg-type]
        print(f"Saved. Change it with: market-analyst profile set --user {who} ...")
        return None
    print("Not saved: this run uses these answers; the next run asks again.")
    return answers


DRAFT_HELP = (
    "Decide only if this is still the current draft (its ID, as status shows it); "
    "without it, the current draft, which is named first."
)


def approve(
    thread_id: str = typer.Argument(..., help="The thread to approve."),
    user: str = typer.Option(
        None, "--user", help="Who approves (recorded as unverified; MA_APPROVERS may restrict it)."
    ),
    note: str = typer.Option("", "--note", help="A note recorded with the approval."),
    draft: str = typer.Option(None, "--draft", help=DRAFT_HELP),
    allow_stale: bool = typer.Option(
        False,
        "--allow-stale",
        help="Approve a draft older than MA_MAX_DRAFT_AGE (revise re-analyses instead).",
    ),
    durability: Durability | None = typer.Option(None, "--durability", help=DURABILITY_HELP),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Approve the thread's draft and publish it to the archive."""
    from market_analyst.workflow import approve_thread

    settings = load_settings(durability=durability, checkpointer=checkpointer)
    with stops_as_json(json_output):
        view = approve_thread(
            settings,
            thread_id,
            user=user,
            note=note,
            draft_id=draft,
            allow_stale=allow_stale,
            progress=progress_printer(),
            announce=None if json_output else announcer(),
        )
    if json_output:
        emit_json(thread_json(view))
    else:
        render_approval(view)
        if view.message:
            print(f"  Note: {view.message}")


def reject(
    thread_id: str = typer.Argument(..., help="The thread to reject."),
    reason: str = typer.Option(..., "--reason", help="Why the draft must not be published (required)."),
    user: str = typer.Option(None, "--user", help="Who rejects (recorded as unverified)."),
    draft: str = typer.Option(None, "--draft", help=DRAFT_HELP),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Reject the thread's draft: the run ends and nothing is published."""
    from market_analyst.workflow import reject_thread

    with stops_as_json(json_output):
        view = reject_thread(
            load_settings(checkpointer=checkpointer),
            thread_id,
            reason=reason,
            user=user,
            draft_id=draft,
            announce=None if json_output else announcer(),
        )
    if json_output:
        emit_json(thread_json(view))
    else:
        print(f"Rejected thread {view.thread_id}: nothing was published.")
        if view.message:
            print(f"  Note: {view.message}")


def revise(
    thread_id: str = typer.Argument(..., help="The thread to revise."),
    feedback: str = typer.Option(None, "--feedback", help="What the next draft should address."),
    question: str = typer.Option(None, "--question", "-q", help="A new question for this thread's report."),
    risk_tolerance: RiskTolerance | None = typer.Option(
        None, "--risk-tolerance", help="Analyse this thread as conservative, moderate or aggressive."
    ),
    horizon: Horizon | None = typer.Option(
        None, "--horizon", help="Analyse this thread for a short, medium or long horizon."
    ),
    user: str = typer.Option(None, "--user", help="Who revises (recorded as unverified)."),
    draft: str = typer.Option(None, "--draft", help=DRAFT_HELP),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Analyse again with feedback (and options for this thread only), and stop at the gate again."""
    from market_analyst.workflow import revise_thread

    with stops_as_json(json_output):
        view = revise_thread(
            load_settings(checkpointer=checkpointer),
            thread_id,
            feedback=feedback,
            question=question,
            risk_tolerance=risk_tolerance,
            horizon=horizon,
            user=user,
            draft_id=draft,
            progress=None if json_output else progress_printer(),
            announce=None if json_output else announcer(),
        )
    if json_output:
        emit_json(thread_json(view))
    else:
        render_revision(view)
        render_view(view)
        if view.message:
            print(f"  Note: {view.message}")


def resume(
    thread_id: str = typer.Argument(..., help="The thread to continue."),
    durability: Durability | None = typer.Option(None, "--durability", help=DURABILITY_HELP),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Continue a thread from its last checkpoint (after a crash), up to the gate or to the end."""
    from market_analyst.workflow import resume_thread

    settings = load_settings(durability=durability, checkpointer=checkpointer)
    with stops_as_json(json_output):
        view = resume_thread(settings, thread_id, progress=None if json_output else progress_printer())
    if json_output:
        emit_json(thread_json(view))
    else:
        print(f"{view.message.capitalize()}.")
        render_view(view)


def status(
    thread_id: str = typer.Argument(..., help="The thread to show."),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show where a thread stands: the pending node before approval, the archive key after."""
    from market_analyst.workflow import thread_status

    view = thread_status(load_settings(checkpointer=checkpointer), thread_id)
    show(view, json_output)


def register(app: typer.Typer) -> None:
    """Add the run commands to the root app."""
    for command in (analyze, approve, reject, revise, resume, status):
        app.command()(command)
