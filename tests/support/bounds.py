"""A bound on every test, and a record of what is running.

Every test gets pytest-timeout's `timeout` marker from its tier (`TIER_TIMEOUTS`) unless it carries
one of its own, which says why beside it. When the bound is hit, the test fails by name with the
stack of every thread of the worker in its message (so the report carries them through xdist), and
its fixtures are torn down as after any failure, which stops the servers it started. Should the
test not come back from that (stuck in C code, or a teardown that hangs in turn), `faulthandler`
writes every thread's stack to `.cache/running/<pid>.stacks` a little later and ends the worker,
which xdist reports as a crash of that test and replaces; the run goes on.

Each test process also writes the test it is running to `.cache/running/<pid>`, so that a run
stopped from outside (`.ci/run`'s bound on the whole run) can say which tests were still running
(`python -m tests.support.bounds running`). A whole run forgets first what ended processes left.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import IO, Any

import pytest

from tests.support import REPO

# Seconds per test, by tier: time for the slowest ordinary test of the tier on a busy 2-core machine.
TIER_TIMEOUTS = {"unit": 120, "conformance": 120, "journeys": 300, "system": 300}
# How long after the bound the worker is ended if the failure could not get through.
BACKSTOP_SECONDS = 60
RUNNING = REPO / ".cache" / "running"


def add_tier_timeout(item: pytest.Item, tier: str) -> None:
    """Give `item` its tier's bound, unless it has a `timeout` marker or `--timeout` was given."""
    if item.get_closest_marker("timeout") is None and item.config.getvalue("timeout") is None:
        item.add_marker(pytest.mark.timeout(TIER_TIMEOUTS[tier]))


def every_stack(current: Any = None) -> str:
    """The stack of every thread of this process, named; `current` is the interrupted frame of the
    main thread (a signal handler's), which `sys._current_frames` would show inside the handler."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    frames = sys._current_frames()
    main = threading.main_thread().ident
    if current is not None and main is not None:
        frames[main] = current
    parts = []
    for ident, frame in frames.items():
        parts.append(f"--- thread {names.get(ident, '<unknown>')} ({ident}) ---\n")
        parts.append("".join(traceback.format_stack(frame)))
    return "".join(parts)


class Bounds:
    """The pytest plugin: pytest-timeout's timer hooks, done with SIGALRM and a faulthandler backstop."""

    def __init__(self) -> None:
        RUNNING.mkdir(parents=True, exist_ok=True)
        self.marker = RUNNING / str(os.getpid())
        self.stacks: IO[str] | None = None

    def _stacks_file(self) -> IO[str]:
        if self.stacks is None:
            self.stacks = open(RUNNING / f"{os.getpid()}.stacks", "a")  # noqa: SIM115 (open for the session)
        return self.stacks

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.marker.write_text(nodeid + "\n")

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.marker.unlink(missing_ok=True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool:
        seconds = float(settings.timeout)

        def expired(signum: int, frame: Any) -> None:
            __tracebackhide__ = True
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            pytest.fail(
                f"{item.nodeid} passed its bound of {seconds:g} s (tests/support/bounds.py); "
                f"every thread's stack:\n{every_stack(frame)}",
                pytrace=False,
            )

        signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        out = self._stacks_file()
        out.write(f"=== {item.nodeid}: ended {BACKSTOP_SECONDS} s after its bound of {seconds:g} s ===\n")
        out.flush()
        faulthandler.dump_traceback_later(seconds + BACKSTOP_SECONDS, exit=True, file=out)
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> bool:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        faulthandler.cancel_dump_traceback_later()
        if self.stacks is not None:  # the heading written for a bound that was not hit
            self.stacks.truncate(0)
            self.stacks.seek(0)
        return True

    def pytest_unconfigure(self) -> None:
        self.marker.unlink(missing_ok=True)
        if self.stacks is not None:
            self.stacks.close()
            path = Path(self.stacks.name)
            if path.exists() and path.stat().st_size == 0:
                path.unlink()


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def tidy_running() -> None:
    """Forget what processes that have ended left (a killed worker's record and stacks): at the
    start of a whole run, so that its summary names only its own."""
    if RUNNING.is_dir():
        for path in RUNNING.iterdir():
            if not _alive(path.name.split(".")[0]):
                path.unlink(missing_ok=True)


def report_running(out: IO[str] = sys.stdout, running: bool = True) -> None:
    """Print the tests that live processes are running (unless not `running`) and the stacks of any
    worker that the backstop ended."""
    if not RUNNING.is_dir():
        return
    for path in sorted(RUNNING.iterdir()) if running else []:
        if path.suffix != ".stacks" and _alive(path.name):
            out.write(f"still running (pid {path.name}): {path.read_text().strip()}\n")
    for path in sorted(RUNNING.glob("*.stacks")):
        if "Timeout (" in (text := path.read_text(errors="replace")):  # faulthandler wrote
            out.write(f"stacks of ended worker {path.stem}:\n{text}\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["running"]:
        sys.exit("usage: python -m tests.support.bounds running")
    report_running()
