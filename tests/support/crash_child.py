"""Runs the real CLI in this process and SIGKILLs the process at a chosen point.

    python -m tests.support.crash_child KILL_POINT market-analyst-args...

Kill points:
  after-archive-write   inside `publish`, after the archive holds the document, before the checkpoint
  before:NODE           as NODE starts (in `sync` mode its predecessor's checkpoint is written)
  after:NODE            as NODE returns, before its writes are checkpointed
  before:NODE#N         the Nth time NODE starts in this process (the LLM analyst's loop runs
                        `analyze` once a model turn); likewise after:NODE#N
  at:SECONDS            a timer fires after SECONDS, wherever the run is
  call:before|after:MODULE:ATTR[:N]
                        just before or after the Nth call of MODULE's ATTR (a function, or
                        `Class.method`), for commands that run no graph (prune, forget)
  pause-before:NODE:DIR not a kill: as NODE starts, create DIR/reached and wait for DIR/go
                        (the test stops the database in between)
  none                  no kill (a reference run through the same entry point)

Only the kill is injected, through the graph's own instrumentation hook (`add_node_wrapper`): the
graph, the checkpointer and the archive are the real ones.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from market_analyst.graph import NODES, add_node_wrapper

_code_file: str | None = None


def record_exit_code_in(path: str) -> None:
    """Write -9 to `path` as this process kills itself (the crash harness reads it when the
    forkserver loses the child's status)."""
    global _code_file
    _code_file = path


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if _code_file is not None:
        Path(_code_file).write_text(str(-signal.SIGKILL))
    os.kill(os.getpid(), signal.SIGKILL)


def _around(target: str, before: Callable[[], None], after: Callable[[], None], occurrence: int = 1) -> None:
    """Call `before` as node `target` starts and `after` as it returns, the `occurrence`th time it runs."""
    runs = 0

    def wrapper(name: str, node: Callable[..., Any]) -> Callable[..., Any]:
        if name != target:
            return node

        @functools.wraps(node)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            nonlocal runs
            runs += 1
            armed = runs == occurrence
            if armed:
                before()
            result = node(*args, **kwargs)
            if armed:
                after()
            return result

        return wrapped

    add_node_wrapper(wrapper)


class _DieAfterWrite:
    """An archive that dies right after its write reached the disk, before `publish` returns."""

    def __init__(self, archive: Any) -> None:
        self.archive = archive

    def publish_report(self, request: Any) -> Any:
        self.archive.publish_report(request)
        _die()


def _kill_after_archive_write() -> None:
    def wrapper(name: str, node: Callable[..., Any]) -> Callable[..., Any]:
        if name != "publish":
            return node

        @functools.wraps(node)
        def wrapped(*args: Any, runtime: Any, **kwargs: Any) -> Any:
            deps = dataclasses.replace(runtime.context, archive=_DieAfterWrite(runtime.context.archive))
            return node(*args, runtime=runtime.override(context=deps), **kwargs)

        return wrapped

    add_node_wrapper(wrapper)


def _pause(directory: str) -> None:
    Path(directory, "reached").touch()
    while not Path(directory, "go").exists():
        time.sleep(0.05)


def log_nodes(path: str) -> None:
    """Append the name of every node this process starts to `path` (what a recovery re-ran)."""

    def wrapper(name: str, node: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(node)
        def logged(*args: Any, **kwargs: Any) -> Any:
            with open(path, "a") as handle:
                handle.write(name + "\n")
            return node(*args, **kwargs)

        return logged

    add_node_wrapper(wrapper)


def arm_call(spec: str) -> None:
    """SIGKILL this process just before or just after the N-th call (default the first) of a module's
    function or `Class.method`: `before|after:MODULE:ATTR[:N]`."""
    when, module_name, attr, *rest = spec.split(":")
    nth = int(rest[0]) if rest else 1
    owner: Any = importlib.import_module(module_name)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    original: Callable[..., Any] = getattr(owner, name)
    calls = 0

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == nth and when == "before":
            _die()
        result = original(*args, **kwargs)
        if calls == nth and when == "after":
            _die()
        return result

    setattr(owner, name, wrapped)


def install(kill_point: str) -> None:
    """Arm the kill point in this process."""
    if kill_point == "none":
        return
    if kill_point == "after-archive-write":
        _kill_after_archive_write()
        return
    kind, _, arg = kill_point.partition(":")
    if kind == "pause-before":
        node, _, directory = arg.partition(":")
        _around(node, lambda: _pause(directory), lambda: None)
        return
    node, _, nth = arg.partition("#")
    if kind in ("before", "after") and node in NODES:
        nothing: Callable[[], None] = lambda: None  # noqa: E731
        before, after = (_die, nothing) if kind == "before" else (nothing, _die)
        _around(node, before, after, int(nth or 1))
        return
    if kind == "call":
        arm_call(arg)
        return
    if kind == "at":
        timer = threading.Timer(float(arg), _die)
        timer.daemon = True
        timer.start()
        return
    raise SystemExit(f"unknown kill point {kill_point!r}")


if __name__ == "__main__":
    install(sys.argv[1])
    from market_analyst.cli import main

    main(sys.argv[2:])
