"""A crash harness: run the real CLI in child processes forked from a server that has already
imported the package, kill them with SIGKILL at a chosen point, and record which nodes ran.

Forking from a pre-imported server (`multiprocessing`'s forkserver) makes a child cost a fraction
of a second instead of the ~2 s of imports a new interpreter pays, which is what lets the whole
crash matrix run inside the suite's time budget. Each child is still a separate process with its own
connections; the kill is a real SIGKILL.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What a command imports on its way (the CLI imports its commands' modules lazily, as it runs them):
# imported here once, not in every child. The last one loads the embedder's model and freezes the
# server's heap (see tests/support/forkserver_ready.py): without the freeze, each import here made
# every child slower, its collector walking the server's objects.
PRELOAD = [
    "market_analyst.cli",
    "market_analyst.workflow",
    "market_analyst.workflow.runs",
    "market_analyst.workflow.threads",
    "market_analyst.graph",
    "market_analyst.deps",
    "market_analyst.analyst.rules",
    "market_analyst.market_data.snapshot",
    "market_analyst.persistence.memory.edge",
    "market_analyst.persistence.profiles.edge",
    "langgraph.checkpoint.postgres",
    "langgraph.checkpoint.redis",
    "psycopg",
    "tests.support.crash_child",
    "tests.support.port_writers",
    "qdrant_client",
    "langchain_openai",
    "qdrant_edge",
    "tests.support.forkserver_ready",  # last: it freezes what the others made
]


@dataclass
class Outcome:
    """A finished (or killed) child."""

    returncode: int
    stdout: str
    stderr: str
    nodes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def killed(self) -> bool:
        return self.returncode == -9

    def check(self) -> Outcome:
        """This outcome, if the child exited 0; otherwise fail with what it printed."""
        assert self.returncode == 0, f"child exited {self.returncode}: {self.stderr.strip()}"
        return self

    def json(self) -> Any:
        return json.loads(self.stdout)


def _child(argv: list[str], env: dict[str, str], cwd: str, kill_point: str, files: dict[str, str]) -> None:
    _end_with_the_fork_server()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.stdout = open(files["out"], "w")  # noqa: SIM115 - closed by the process exit
    sys.stderr = open(files["err"], "w")  # noqa: SIM115
    from tests.support import crash_child

    crash_child.log_nodes(files["nodes"])
    crash_child.record_exit_code_in(files["code"])
    crash_child.install(kill_point)
    from market_analyst.cli import main

    if "go" in files:  # started with others (`run_together(at_once=True)`): say so, wait for the go
        Path(files["ready"]).touch()
        while not Path(files["go"]).exists():
            time.sleep(0.002)
    code = 1
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # The exit code as the child itself ends with it: the forkserver reports 255 when it loses a
        # child's status (multiprocessing.popen_forkserver), which no command exits with.
        Path(files["code"]).write_text(str(code))


def die_with_parent() -> None:
    """In a child (before exec, for `subprocess.Popen`): on Linux, SIGKILL it when its parent dies, so
    a killed or timed-out pytest leaves no server behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _end_with_the_fork_server() -> None:
    """In a child of the fork server: SIGKILL this process when the fork server ends, and let it end
    with the test process. The fork server ends once no process holds its "alive" pipe, and every
    child inherits that pipe: a child that keeps it (a server, a hung command) would keep the fork
    server, and itself, running after the test process died."""
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver  # type: ignore[attr-defined]
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
    die_with_parent()


def _serve(argv: list[str], env: dict[str, str], cwd: str, log: str) -> None:
    """A child of `Harness.serve`: in a session of its own, as a server started by `subprocess.Popen`
    with `start_new_session` would be, and killed with the fork server (which ends with the test
    process). Its output, its libraries' and its own children's, goes to `log`."""
    os.setsid()
    _end_with_the_fork_server()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the process's own streams
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    from market_analyst.cli import main

    main(argv)


@dataclass
class Forked:
    """A child started by `Harness.serve`, with the part of `subprocess.Popen` that the tests use."""

    proc: Any
    args: list[str]

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def poll(self) -> int | None:
        return self.proc.exitcode  # type: ignore[no-any-return]

    def wait(self, timeout: float | None = None) -> int:
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return int(self.proc.exitcode)

    def terminate(self) -> None:
        self.proc.terminate()

    def kill(self) -> None:
        self.proc.kill()

    def send_signal(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)


# What multiprocessing's forkserver reports for a child whose status it could not read back.
LOST_STATUS = 255


class Harness:
    """Runs CLI commands in forked children; one per test worker."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(PRELOAD)
        self.counter = 0

    def _start(
        self, argv: list[str], env: dict[str, str], kill_point: str, cwd: Path | None, go: Path | None = None
    ) -> _Running:
        self.counter += 1
        base = self.workdir / f"child-{os.getpid()}-{self.counter}"
        files = {k: f"{base}.{k}" for k in ("out", "err", "nodes", "code", *(("ready",) if go else ()))}
        if go is not None:
            files["go"] = str(go)
        proc = self.ctx.Process(target=_child, args=(argv, env, str(cwd or self.workdir), kill_point, files))
        running = _Running(argv, proc, files, time.monotonic())
        proc.start()
        return running

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        kill_point: str = "none",
        timeout: float = 120,
        cwd: Path | None = None,
    ) -> Outcome:
        """Run `market-analyst argv...` in a child; kill it at `kill_point` (see support/crash_child.py)."""
        return self._start(argv, env, kill_point, cwd).finish(timeout)

    def run_together(
        self,
        jobs: list[tuple[list[str], dict[str, str]]],
        timeout: float = 180,
        cwd: Path | None = None,
        at_once: bool = False,
    ) -> list[Outcome]:
        """Start every job at once, each in its own child process, and wait for all of them. With
        `at_once`, every child says it is ready and waits, and once all are ready they run together,
        so that they reach their stores at the same moment rather than one fork apart."""
        self.counter += 1
        go = self.workdir / f"go-{os.getpid()}-{self.counter}" if at_once else None
        running = [self._start(argv, env, "none", cwd, go) for argv, env in jobs]
        if go is not None:
            _let_go(
                [job.proc for job in running],
                [Path(job.files["ready"]) for job in running],
                go,
                timeout,
                [Path(job.files["err"]) for job in running],
            )
        return [job.finish(timeout) for job in running]

    def call_together(
        self,
        target: Callable[..., Any],
        calls: list[tuple[Any, ...]],
        timeout: float = 120,
        setup: Callable[..., Any] | None = None,
    ) -> list[Any]:
        """Call `target(*args)` for each `args` in a child process of its own, all at once: every child
        starts, says it is ready and waits, and once all are ready they are let go together. Returns
        what each call returned (JSON), in order; fails with its traceback if one raised. With
        `setup`, each child calls `setup(*args)` before it says it is ready, then `target` on what
        that returned."""
        self.counter += 1
        base = self.workdir / f"call-{os.getpid()}-{self.counter}"
        go = Path(f"{base}.go")
        files = [{k: f"{base}-{n}.{k}" for k in ("ready", "out", "err")} for n in range(len(calls))]
        procs = [
            self.ctx.Process(target=_call, args=(target, setup, args, str(go), paths))
            for args, paths in zip(calls, files, strict=True)
        ]
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + timeout
        _let_go(
            procs, [Path(paths["ready"]) for paths in files], go, timeout, [Path(p["err"]) for p in files]
        )
        results = []
        for proc, paths in zip(procs, files, strict=True):
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
                raise AssertionError(f"{target.__name__} did not finish in {timeout} s")
            err = Path(paths["err"]).read_text() if Path(paths["err"]).exists() else ""
            assert proc.exitcode == 0, f"{target.__name__} exited {proc.exitcode}: {err}"
            results.append(json.loads(Path(paths["out"]).read_text()))
        return results

    def serve(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> Forked:
        """Start `market-analyst argv...`, a command that runs until it is stopped (`serve`), in a
        child of its own with its output in `log`; the child answers as a `subprocess.Popen` would."""
        # Daemonic: a server that a test left running is ended as the test process exits, not waited for.
        proc = self.ctx.Process(target=_serve, args=(argv, env, str(cwd), str(log)), daemon=True)
        proc.start()
        return Forked(proc, argv)

    def hold(
        self, target: Callable[..., Any], args: tuple[Any, ...], until: str, timeout: float = 60
    ) -> Held:
        """Start `target(*args, said)` in a child process of its own and return once it has said
        `until` (`say(said, until)`), as a holder of some resource says it holds it."""
        self.counter += 1
        said = self.workdir / f"held-{os.getpid()}-{self.counter}.said"
        proc = self.ctx.Process(target=target, args=(*args, str(said)))
        proc.start()
        held = Held(proc, said)
        deadline = time.monotonic() + timeout
        while until not in held.said():
            if not proc.is_alive() or time.monotonic() > deadline:
                proc.kill()
                proc.join()
                raise AssertionError(f"{target.__name__} did not say {until!r}: {held.said()!r}")
            time.sleep(0.01)
        return held


def _let_go(
    procs: list[Any], ready: list[Path], go: Path, timeout: float, errors: Sequence[Path] = ()
) -> None:
    """Wait until every child has said it is ready (`ready`), then let all go at once (`go`). If one
    ends first, or `timeout` passes, kill every child (none is left waiting for a go that never
    comes) and fail with what the children wrote to `errors`."""
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in ready):
        if any(proc.exitcode is not None for proc in procs) or time.monotonic() > deadline:
            for proc in procs:
                proc.kill()
                proc.join()
            said = "".join(path.read_text() for path in errors if path.exists())
            codes = [proc.exitcode for proc in procs]
            raise AssertionError(f"a child did not get ready (exit codes {codes}): {said}")
        time.sleep(0.005)
    go.touch()


def say(said: str, word: str) -> None:
    """For a child started by `Harness.hold`: tell the test `word` (one word a call)."""
    with open(said, "a") as out:
        out.write(word + "\n")


@dataclass
class Held:
    """A child started by `Harness.hold`: it runs until it ends or is killed."""

    proc: Any
    said_file: Path

    def said(self) -> list[str]:
        """The words the child has said so far (`say`)."""
        return self.said_file.read_text().split() if self.said_file.exists() else []

    def kill(self) -> None:
        self.proc.kill()

    def send_signal(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to end; fail if it still runs after `timeout` seconds."""
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
            raise AssertionError(f"the child did not end within {timeout} s")
        return int(self.proc.exitcode)


def _call(
    target: Callable[..., Any],
    setup: Callable[..., Any] | None,
    args: tuple[Any, ...],
    go: str,
    files: dict[str, str],
) -> None:
    """A child of `Harness.call_together`: set up, ready, wait for the go, call, write the result."""
    try:
        if setup is not None:
            args = (setup(*args),)
        Path(files["ready"]).touch()
        while not Path(go).exists():
            time.sleep(0.002)
        result = target(*args)
    except BaseException:
        Path(files["err"]).write_text(traceback.format_exc())
        os._exit(1)
    Path(files["out"]).write_text(json.dumps(result))


@dataclass
class _Running:
    """A child started by the harness."""

    argv: list[str]
    proc: Any
    files: dict[str, str]
    started: float

    def finish(self, timeout: float) -> Outcome:
        self.proc.join(max(0.0, self.started + timeout - time.monotonic()))
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
            raise AssertionError(f"{self.argv} did not finish in {timeout} s")

        def read(name: str) -> str:
            path = Path(self.files[name])
            return path.read_text() if path.exists() else ""

        nodes = [line for line in read("nodes").splitlines() if line]
        code = self.proc.exitcode if self.proc.exitcode is not None else -1
        if code == LOST_STATUS and read("code"):  # the code the child wrote as it ended, or was killed
            code = int(read("code"))
        return Outcome(code, read("out"), read("err"), nodes, time.monotonic() - self.started)
