"""The package modules two paths pass through: a decision (`market-analyst approve THREAD`, from the
CLI's command function through the gate to `publish`) and one `/healthz` request.

Each path runs in a fresh interpreter over a data directory of its own (a thread is first analysed
to the gate, untraced). A module counts when a function of its own runs on the path: the calls
`sys.setprofile` sees, in every thread, in files of the `market_analyst` package. Modules whose body
(or a class body) only ran, imported on the way, are counted apart, and so are the calls into
`deps.py` from outside it.

Usage: python scripts/trace_modules.py [--src DIR] [--json]
  --src DIR   trace another version's package, DIR being its `src/`: for one commit,
              `mkdir /tmp/v && git archive COMMIT src | tar -x -C /tmp/v`, then --src /tmp/v/src
  --json      every module on each path, not only the counts
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SETTING_PREFIXES = ("MA_", "POSTGRES_", "REDIS_", "QDRANT_", "OPENAI_")

# Run in the child: trace `body` (a function of no arguments) and write what it passed through.
CHILD = r"""
import inspect, json, sys, threading
from pathlib import Path

def trace(body, out):
    import market_analyst
    root = str(Path(market_analyst.__file__).parent) + "/"
    ran, imported, into_deps, started = set(), set(), [], set()
    GENERATOR = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR

    def profile(frame, event, arg):
        if event != "call":
            return
        name = frame.f_code.co_filename
        if not name.startswith(root):
            return
        module = name[len(root):]
        if frame.f_code.co_flags & GENERATOR:  # a generator's resumption is no new call
            if frame in started:
                return
            started.add(frame)
        if not frame.f_code.co_flags & inspect.CO_NEWLOCALS or (
            frame.f_code.co_name.startswith("<")  # a comprehension run by a module's or a class's body
            and frame.f_back is not None
            and not frame.f_back.f_code.co_flags & inspect.CO_NEWLOCALS
        ):  # a module's or a class's body: an import on the way
            imported.add(module)
            return
        ran.add(module)
        caller = frame.f_back
        while caller is not None and caller.f_code.co_filename.endswith("contextlib.py"):
            caller = caller.f_back  # a context manager's generator runs under contextlib's frames
        # A call into the factory from outside it (not the closures it hands out, called later).
        outside = caller is None or caller.f_code.co_filename != name
        if module == "deps.py" and outside and "<locals>" not in frame.f_code.co_qualname:
            into_deps.append(frame.f_code.co_name)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        body()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    Path(out).write_text(json.dumps(
        {"ran": sorted(ran), "imported": sorted(imported - ran), "into_deps": into_deps}
    ))
"""

SETUP = r"""
from market_analyst.settings import Settings
from market_analyst.workflow import start_analysis
view = start_analysis(Settings.load(), "AAPL", user="alice")
print(view.thread_id)
"""

APPROVE = r"""
from market_analyst.cli.runs import approve
thread_id, out = sys.argv[1], sys.argv[2]
trace(lambda: approve(thread_id, user="bob", note="", draft=None, allow_stale=False,
                      durability=None, checkpointer=None, json_output=True), out)
"""

HEALTH = r"""
from fastapi.testclient import TestClient
from market_analyst.settings import Settings
from market_analyst.web.app import create_app
out = sys.argv[2]
client = TestClient(create_app(Settings.load()), base_url="http://127.0.0.1")
answers = []
trace(lambda: answers.append(client.get("/healthz")), out)
assert answers[0].status_code == 200, answers[0].text
"""

STOP = r"""
from market_analyst.deps import stop_embedded_server
from market_analyst.settings import Settings
stop_embedded_server(Settings.load())
"""


def _python(code: str, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(f"the child failed:\n{done.stderr[-3000:]}")
    return done.stdout


def measure(src: Path) -> dict[str, Any]:
    """Both paths over the package under `src`: for each, the modules that ran, those only imported,
    and the calls into deps.py."""
    with tempfile.TemporaryDirectory(prefix="trace-modules-") as tmp:
        runtime = Path(tmp, "run")
        runtime.mkdir(mode=0o700)
        # The defaults (embedded PostgreSQL, files, the Edge stores, the rules analyst) in `tmp`.
        env = {k: v for k, v in os.environ.items() if not k.startswith(SETTING_PREFIXES)}
        env.update(
            PYTHONPATH=str(src),
            PYTHONDONTWRITEBYTECODE="1",
            MA_DATA_DIR=str(Path(tmp, "data")),
            XDG_RUNTIME_DIR=str(runtime),
        )
        try:
            thread_id = _python(SETUP, env).strip().splitlines()[-1]
            results = {}
            for path, code in (("approve", APPROVE), ("healthz", HEALTH)):
                out = Path(tmp, f"{path}.json")
                _python(CHILD + code, env, thread_id, str(out))
                results[path] = json.loads(out.read_text())
        finally:
            _python(STOP, env)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=REPO / "src")
    parser.add_argument("--json", action="store_true", help="print every module, as JSON")
    options = parser.parse_args()
    results = measure(options.src.resolve())
    if options.json:
        print(json.dumps(results, indent=2))
        return 0
    for path, found in results.items():
        print(
            f"{path}: {len(found['ran'])} modules ran, {len(found['imported'])} more imported; "
            f"calls into deps.py: {len(found['into_deps'])} ({', '.join(found['into_deps'])})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
