"""Runs the real CLI in this process and SIGKILLs the process at a chosen point.

    python -m tests.crash_child KILL_POINT market-analyst-args...

Kill points:
  after-archive-write   inside `publish`, after the archive holds the document, before the checkpoint
  before:NODE           as NODE starts (in `sync` mode its predecessor's checkpoint is written)
  after:NODE            as NODE returns, before its writes are checkpointed
  at:SECONDS            a timer fires after SECONDS, wherever the run is
  pause-before:NODE:DIR not a kill: as NODE starts, create DIR/reached and wait for DIR/go
                        (the test stops the database in between)
  none                  no kill (a reference run through the same entry point)

Only the kill is injected: the graph, the checkpointer and the archive are the real ones.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

NODE_NAMES = ("load_profile", "fetch_market_data", "analyze", "draft_report", "publish")


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _wrap_node(name: str, when: str) -> None:
    import market_analyst.graph as graph_module

    original = getattr(graph_module, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if when == "before":
            _die()
        result = original(*args, **kwargs)
        if when == "after":
            _die()
        return result

    setattr(graph_module, name, wrapped)


def _pause_before(name: str, directory: str) -> None:
    import market_analyst.graph as graph_module

    original = getattr(graph_module, name)

    def paused(*args: Any, **kwargs: Any) -> Any:
        Path(directory, "reached").touch()
        while not Path(directory, "go").exists():
            time.sleep(0.05)
        return original(*args, **kwargs)

    setattr(graph_module, name, paused)


def log_nodes(path: str) -> None:
    """Append the name of every node this process starts to `path` (what a recovery re-ran)."""
    import market_analyst.graph as graph_module

    for name in NODE_NAMES:
        original = getattr(graph_module, name)

        def logged(*args: Any, __name: str = name, __original: Any = original, **kwargs: Any) -> Any:
            with open(path, "a") as handle:
                handle.write(__name + "\n")
            return __original(*args, **kwargs)

        setattr(graph_module, name, logged)


def install(kill_point: str) -> None:
    """Arm the kill point in this process."""
    if kill_point == "none":
        return
    if kill_point == "after-archive-write":
        from market_analyst.persistence.archive import ReportArchive

        original = ReportArchive.publish

        def publish_then_die(self: ReportArchive, key: str, document: dict[str, Any]) -> Any:
            original(self, key, document)
            _die()

        ReportArchive.publish = publish_then_die  # type: ignore[method-assign]
        return
    kind, _, arg = kill_point.partition(":")
    if kind == "pause-before":
        node, _, directory = arg.partition(":")
        _pause_before(node, directory)
        return
    if kind in ("before", "after") and arg in NODE_NAMES:
        _wrap_node(arg, kind)
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
