"""`remember` and `memories list|show|forget|reindex`: what a user's later runs recall."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

from market_analyst.cli.common import JSON_OPTION, emit_json, load_settings
from market_analyst.formatting import who_said

if TYPE_CHECKING:
    from market_analyst.state import Memory

app = typer.Typer(
    help="List, show or forget what a user's runs remember (kept across threads, in Qdrant).",
    no_args_is_help=True,
)

USER_HELP = (
    "Whose memories: 1-64 letters, digits, '.', '_', '@' or '-' (scoping for a local tool, "
    "not authentication). Env: MA_USER; default 'local'."
)
ID_HELP = "The memory's ID, as `memories list` shows it."


def _as_json(memory: Memory) -> dict[str, Any]:
    return memory.model_dump(mode="json")


def _line(memory: Memory) -> str:
    ticker = memory.ticker or "-"
    state = "  (superseded)" if memory.superseded else ""
    when = memory.created_at.strftime("%Y-%m-%d")
    who = who_said(memory.kind, memory.said_by, memory.owner)
    return f"{memory.id}  {when}  {memory.kind:<13} {ticker:<7} [{who}] {memory.text}{state}"


def _details(memory: Memory) -> None:
    print(f"memory {memory.id}")
    for label, value in (
        ("owner", memory.owner),
        ("kind", memory.kind),
        ("ticker", memory.ticker),
        ("created at", memory.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")),
        ("thread", memory.thread_id),
        ("draft", memory.draft_id),
        ("archive key", memory.archive_key),
        ("said by", who_said(memory.kind, memory.said_by, memory.owner)),
        ("verified", "yes" if memory.verified else "no"),
        ("replaces", memory.replaces),
        ("superseded", "yes" if memory.superseded else "no"),
    ):
        print(f"  {label + ':':<13}{str(value) if value is not None else '-'}")
    print(f"  {'text:':<13}{memory.text}")


def remember(
    text: str = typer.Argument(..., help="What to keep: 1-1000 characters on one line."),
    user: str = typer.Option(None, "--user", help=USER_HELP),
    ticker: str = typer.Option(None, "--ticker", help="The ticker it is about, if one (e.g. NVDA)."),
    replaces: str = typer.Option(
        None, "--replaces", help="The ID of the user's memory this one replaces (kept, never recalled)."
    ),
    json_output: bool = JSON_OPTION,
) -> None:
    """Keep a note that later runs for this user recall when it is relevant."""
    from market_analyst.workflow.memories import remember as keep

    memory = keep(load_settings(), user, text, ticker=ticker, replaces=replaces)
    if json_output:
        emit_json(_as_json(memory))
        return
    replaced = f"; it replaces {memory.replaces}" if memory.replaces else ""
    print(f"Remembered for user {memory.owner!r} as {memory.id}{replaced}.")


@app.command("list")
def list_memories(
    user: str = typer.Option(None, "--user", help=USER_HELP),
    include_superseded: bool = typer.Option(False, "--all", help="Include memories that were replaced."),
    json_output: bool = JSON_OPTION,
) -> None:
    """List the user's memories, newest first: ID, date, kind, ticker, text."""
    from market_analyst.workflow.memories import list_memories as listed

    settings = load_settings()
    memories = listed(settings, user, include_superseded=include_superseded)
    if json_output:
        emit_json([_as_json(memory) for memory in memories])
    elif not memories:
        print("No memories.", file=sys.stderr)
    else:
        for memory in memories:
            print(_line(memory))


@app.command("show")
def show_memory(
    memory_id: str = typer.Argument(..., help=ID_HELP),
    user: str = typer.Option(None, "--user", help=USER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show one memory with where it came from."""
    from market_analyst.workflow.memories import show_memory as shown

    memory = shown(load_settings(), user, memory_id)
    if json_output:
        emit_json(_as_json(memory))
    else:
        _details(memory)


@app.command("forget")
def forget_memory(
    memory_id: str = typer.Argument(..., help=ID_HELP),
    user: str = typer.Option(None, "--user", help=USER_HELP),
    json_output: bool = JSON_OPTION,
) -> None:
    """Erase one memory; later runs no longer recall it."""
    from market_analyst.workflow.memories import forget_memory as erase

    done = erase(load_settings(), user, memory_id)
    quoted, revived = done.quoted, done.revived
    if json_output:
        emit_json(
            {
                "id": done.memory_id,
                "forgotten": True,
                "threads": quoted.threads,
                "reports": quoted.reports,
                "recalled_again": revived.id if revived else None,
            }
        )
    else:
        print(f"Forgot memory {done.memory_id}.")
        if revived is not None:
            print(f"Memory {revived.id}, which it had replaced, is recalled again.")
        if quoted.threads or quoted.reports:
            print(
                f"Its words were taken out of {len(quoted.threads)} thread(s) and {len(quoted.reports)} "
                "archived report(s) that quoted it."
            )


@app.command("reindex")
def reindex_memories(json_output: bool = JSON_OPTION) -> None:
    """Embed every memory again with the configured model (needed after the model changes)."""
    from market_analyst.workflow.memories import reindex_memories as reindex

    count = reindex(load_settings())
    if json_output:
        emit_json({"reindexed": count})
    else:
        print(f"Embedded {count} memories again.")


@app.command("check")
def check_memories(json_output: bool = JSON_OPTION) -> None:
    """Read every memory and compare the store with its manifest; exit 2 when it fails."""
    from market_analyst.errors import UserError
    from market_analyst.workflow.memories import check_memories as check

    report = check(load_settings())
    previous = report.get("previous")
    if json_output:
        emit_json(report)
    else:
        if report["ok"]:
            print(f"The memory store in {report['store']} passes its check: {report['memories']} memories.")
        else:
            print(f"The memory store in {report['store']} fails its check: {report['problem']}.")
        if previous is None:
            print("It keeps no copy to restore from.")
        elif previous["ok"]:
            print(
                f"Its copy passes its check: {previous['memories']} memories "
                "(`memories restore` puts it back)."
            )
        else:
            print(f"Its copy fails its check too: {previous['problem']}.")
    if not report["ok"]:
        hint = " run `market-analyst memories restore`" if previous and previous["ok"] else ""
        raise UserError(
            f"the memory store fails its check: {report['problem']};{hint or ' it has no good copy'}"
        )


@app.command("restore")
def restore_memories(json_output: bool = JSON_OPTION) -> None:
    """Put the store's copy (as the last change that passed its check left it) back in place of a
    store that fails its check; the damaged one is kept aside until the next erasure."""
    from market_analyst.workflow.memories import restore_memories as restore

    done = restore(load_settings())
    if json_output:
        emit_json(done)
    elif not done["restored"]:
        print(f"The memory store passes its check ({done['memories']} memories): nothing was restored.")
    else:
        kept = f"; the damaged store is kept in {done['kept']} until the next erasure" if done["kept"] else ""
        print(f"Restored the memory store from its copy: {done['memories']} memories{kept}.")


@app.command("sync")
def sync_memories(json_output: bool = JSON_OPTION) -> None:
    """Write the memories that decisions left waiting while the store could not be written."""
    from market_analyst.workflow.memories import sync

    done = sync(load_settings())
    if json_output:
        emit_json(
            {
                "written": done.written,
                "waiting": done.waiting,
                "busy": done.busy,
                "refused": done.refused,
                "unreadable": done.unreadable,
            }
        )
    else:
        if done.written:
            print(f"Wrote {done.written} memory(ies) that waited for the store.")
        elif not (done.waiting or done.busy or done.unreadable):
            print("No memory waited for the store.")
        if done.busy:
            print(
                f"Thread(s) {', '.join(done.busy)} are held by another command; their memories still "
                "wait: run 'market-analyst memories sync' again when it ends."
            )
        if done.refused:
            print(f"{done.refused} outbox entry(ies) were not made by a decision and were not written.")
        if done.unreadable:
            print(
                f"Thread(s) {', '.join(done.unreadable)} are sealed under keys this records store lacks; "
                "their memories still wait."
            )
    if done.waiting:
        from market_analyst.errors import UserError

        raise UserError(f"the memories of {len(done.waiting)} thread(s) still wait: {done.why}")
