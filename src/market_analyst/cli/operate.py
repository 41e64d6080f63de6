"""Commands for operating the stores over months: threads, history, fork, prune, forget."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import typer

from market_analyst.choices import CheckpointerKind, ThreadStatus
from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings, progress_printer
from market_analyst.cli.render import show, stops_as_json
from market_analyst.errors import UserError
from market_analyst.formatting import describe_age

CHECKPOINTER_HELP = "postgres (default) or redis. Env: MA_CHECKPOINTER."
YES_OPTION = typer.Option(False, "--yes", help="Go ahead without asking.")
DRY_RUN_OPTION = typer.Option(False, "--dry-run", help="Say what would go; change nothing.")


def _age(iso: str | None, now: datetime) -> str:
    if not iso:
        return "-"
    return describe_age(max(0.0, (now - datetime.fromisoformat(iso)).total_seconds()))


def threads(
    pending: bool = typer.Option(
        False,
        "--pending",
        help="Only threads waiting for approval (or expired, waiting for a revise), or approved and still "
        "to be published.",
    ),
    status: ThreadStatus | None = typer.Option(None, "--status", help="Only threads in this status."),
    user: str = typer.Option(None, "--user", help="Only threads this user started."),
    ticker: str = typer.Option(None, "--ticker", help="Only threads on this ticker."),
    limit: int = typer.Option(50, "--limit", min=1, help="Show at most this many (newest first)."),
    reindex: bool = typer.Option(
        False, "--reindex", help="Rebuild the thread index from the checkpointer first (every thread)."
    ),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """List threads, newest update first: ticker, user, status, draft age and last update."""
    from market_analyst.workflow import list_threads
    from market_analyst.workflow.inbox import PENDING

    if pending and status not in (None, *PENDING):
        raise UserError(
            "--pending lists the threads of --status awaiting_approval, expired and "
            "approved_pending_publish: give one of --pending and --status"
        )
    statuses: tuple[ThreadStatus, ...] = (status,) if status else PENDING if pending else ()
    settings = load_settings(checkpointer=checkpointer)
    page = list_threads(settings, statuses=statuses, user=user, ticker=ticker, limit=limit, reindex=reindex)
    now = settings.now()
    if json_output:
        emit_json(page.to_json(now))
    elif not page.rows:
        print("No threads match." if (statuses or user or ticker) else "No threads.", file=sys.stderr)
    else:
        print(f"{'thread':<38} {'ticker':<7} {'user':<16} {'status':<25} {'draft age':>9}  last update")
        for row in page.rows:
            shown = "approved, publishing" if row.status == "approved_pending_publish" else row.status
            print(
                f"{row.thread_id:<38} {row.ticker:<7} {row.user_id:<16} {shown:<25} "
                f"{_age(row.drafted_at, now):>9}  {_age(row.updated_at, now)} ago"
            )
    if page.more:
        print(f"... and {page.more} more; raise --limit or narrow the filters to see them", file=sys.stderr)


def history(
    thread_id: str = typer.Argument(..., help="The thread whose checkpoints to list."),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """List the thread's checkpoints, oldest first: step, what wrote it, when, and what changed."""
    from dataclasses import asdict

    from market_analyst.workflow.history import thread_history

    entries = thread_history(load_settings(checkpointer=checkpointer), thread_id)
    if json_output:
        emit_json([asdict(entry) for entry in entries])
        return
    for e in entries:
        changed = f"  {'; '.join(e.changes)}" if e.changes else ""
        after = ", ".join(e.next) or "-"
        print(f"{e.step:>3}  {e.checkpoint_id}  {e.at[:19]}  {e.node:<24} next: {after}{changed}")


def fork(
    thread_id: str = typer.Argument(..., help="The thread to fork."),
    checkpoint: str = typer.Option(..., "--checkpoint", help="The checkpoint to start from (see history)."),
    new_thread_id: str = typer.Option(None, "--thread-id", help="The new thread's ID (default: a new one)."),
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Start a new thread from one of this thread's checkpoints (time travel); the original stays as it is."""
    from market_analyst.workflow.history import fork_thread

    with stops_as_json(json_output):
        view = fork_thread(
            load_settings(checkpointer=checkpointer),
            thread_id,
            checkpoint,
            new_thread_id=new_thread_id,
            progress=None if json_output else progress_printer(),
        )
    show(view, json_output)


def _confirm(yes: bool, dry_run: bool, what: str) -> None:
    if yes or dry_run:
        return
    if not sys.stdin.isatty():
        raise UserError(f"{what}: add --yes to go ahead (or --dry-run to see what would go)")
    if not typer.confirm(f"{what}?", default=False):
        raise typer.Exit(1)


def prune(
    finished_before: str = typer.Option(
        None, "--finished-before", help="Remove finished threads older than an age such as 90d, 12h or 30m."
    ),
    memories_older_than: str = typer.Option(
        None, "--memories-older-than", help="Erase every user's memories older than an age such as 365d."
    ),
    dry_run: bool = DRY_RUN_OPTION,
    yes: bool = YES_OPTION,
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Remove published and rejected threads finished at least this long ago (reports stay archived),
    and memories made at least this long ago."""
    from market_analyst.workflow.retention import PruneResult, prune_memories, prune_threads

    if finished_before is None and memories_older_than is None:
        raise UserError("prune needs --finished-before, --memories-older-than, or both")
    settings = load_settings(checkpointer=checkpointer)
    what = [
        *([f"the threads finished more than {finished_before} ago"] if finished_before is not None else []),
        *(
            [f"the memories made more than {memories_older_than} ago"]
            if memories_older_than is not None
            else []
        ),
    ]
    _confirm(yes, dry_run, f"Remove {' and '.join(what)}")
    result = (
        prune_threads(settings, finished_before=finished_before, dry_run=dry_run)
        if finished_before is not None
        else PruneResult([], dry_run=dry_run)
    )
    memories, quoted = (
        prune_memories(settings, older_than=memories_older_than, dry_run=dry_run)
        if memories_older_than is not None
        else (None, None)
    )
    rows: list[dict[str, Any]] = [
        {"thread_id": r.thread_id, "ticker": r.ticker, "status": r.status} for r in result.threads
    ]
    verb = "Would remove" if dry_run else "Removed"
    if json_output:
        document: dict[str, Any] = {"dry_run": dry_run, "threads": rows, "busy": result.busy}
        if memories is not None and quoted is not None:
            document["memories"] = memories
            document["quoted_in"] = {"threads": quoted.threads, "reports": quoted.reports}
        emit_json(document)
    else:
        if finished_before is not None:
            print(f"{verb} {len(rows)} finished thread(s) last updated {finished_before} or more ago.")
            for r in result.threads:
                print(f"  {r.thread_id}  {r.ticker:<7} {r.status}")
        if memories is not None and quoted is not None:
            print(f"{verb} {memories} memories made {memories_older_than} or more ago.")
            if quoted.threads or quoted.reports:
                done = "would be taken" if dry_run else "were taken"
                print(
                    f"  their words {done} out of {len(quoted.threads)} thread(s) and "
                    f"{len(quoted.reports)} archived report(s) that quoted them"
                )
    if result.busy:
        raise UserError(
            f"{len(result.busy)} thread(s) were busy and kept: {', '.join(result.busy)}; run prune again"
        )


def forget(
    user: str = typer.Option(..., "--user", help="The user to erase from every store."),
    including_said_by: bool = typer.Option(
        False,
        "--including-said-by",
        help="Also take their words (notes, reasons, feedback) out of other users' threads, memories "
        "and reports, where they were the reviewer or approver.",
    ),
    dry_run: bool = DRY_RUN_OPTION,
    yes: bool = YES_OPTION,
    checkpointer: CheckpointerKind | None = typer.Option(None, "--checkpointer", help=CHECKPOINTER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Erase one user everywhere: their threads and the data keys that sealed them, archived reports,
    profile, memories, lease keys, and their personal content in the audit log (the entries and their
    chain stay). Their words in other users' records are counted, and with --including-said-by
    redacted."""
    from dataclasses import asdict

    from market_analyst.workflow.retention import forget_user

    settings = load_settings(checkpointer=checkpointer)
    _confirm(yes, dry_run, f"Erase user {user!r} from every store")
    result = forget_user(settings, user, dry_run=dry_run, including_said_by=including_said_by)
    if json_output:
        emit_json(asdict(result))
    else:
        verb = "Would erase" if dry_run else "Erased"
        print(f"{verb} user {result.user_id!r}:")
        print(f"  threads (checkpointer): {len(result.threads)}")
        print(f"  reports (archive documents and index rows): {len(result.reports)}")
        print(f"  profile: {result.profile}")
        print(f"  data keys (every copy of their threads' checkpoints unreadable): {result.data_keys}")
        print(f"  lease keys: {result.lease_keys}")
        print(f"  audit entries (personal content erased, chain kept): {result.audit_entries}")
        print(f"  memories: {result.memories}")
        if result.events is not None:
            print(f"  events (their threads' removed, their name taken out of others'): {result.events}")
        said = result.said_by
        where = f"{len(said.threads)} thread(s), {said.memories} memories, {len(said.reports)} report(s)"
        if result.said_by_redacted:
            print(f"  their words in other users' records (redacted): {where}")
        elif dry_run and including_said_by:
            print(f"  their words in other users' records (would be redacted): {where}")
        elif said.total:
            print(
                f"  their words in other users' records (left as they are): {where}; "
                f"take them out with: market-analyst forget --user {result.user_id} --including-said-by"
            )
        else:
            print("  their words in other users' records: none")
        if said.unreadable:
            count = len(said.unreadable)
            print(f"  other users' threads that cannot be read here, so were not searched: {count}")
    if result.busy:
        raise UserError(
            f"{len(result.busy)} thread(s) were busy and kept: {', '.join(result.busy)}; run forget again"
        )


def register(app: typer.Typer) -> None:
    """Add the operating commands to the root app."""
    for command in (threads, history, fork, prune, forget):
        app.command()(command)
