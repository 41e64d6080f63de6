"""What the commands do, over the graph and the stores; the CLI renders what these return.

The names below load their module on first use, so that a command that only reads a store (profile,
reports, approvers, db) does not import the graph and LangGraph on its way to it."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "revise_thread": "revise",
    "approve_thread": "runs",
    "reject_thread": "runs",
    "resume_thread": "runs",
    "start_analysis": "runs",
    "thread_status": "runs",
    "list_threads": "threads",
    "ThreadStatus": "views",
    "ThreadView": "views",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
