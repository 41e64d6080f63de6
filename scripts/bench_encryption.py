"""Encryption bench: `analyze` to the gate and an `approve`, each a fresh CLI process, with every
checkpoint value sealed under its thread's data key against the same commands with sealing left out,
side by side and interleaved on one embedded PostgreSQL (sync durability, the rules analyst).

The unsealed runs are the same program with the factory's keyring replaced by none (`_PLAIN`, run
only here): nothing in the product turns encryption off.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from market_analyst.persistence.postgres.embedded import discard_embedded_postgres
from market_analyst.settings import Settings

TARGET = 1.15
# The CLI with the checkpointer opened without a keyring: its savers then seal nothing.
_PLAIN = (
    "import sys, market_analyst.deps as deps; deps.open_keyring = lambda settings: None; "
    "from market_analyst.cli import main; sys.argv[0] = 'market-analyst'; main()"
)
_SEALED = "import sys; from market_analyst.cli import main; sys.argv[0] = 'market-analyst'; main()"


def _environment(data_dir: Path) -> dict[str, str]:
    chosen = {"MA_DATA_DIR": str(data_dir), "MA_CHECKPOINTER": "postgres", "MA_DURABILITY": "sync"}
    cleared = {"POSTGRES_URL": "", "MA_APPROVERS": "", "MA_ANALYST": "rules", "SOURCE_DATE_EPOCH": ""}
    return dict(os.environ) | cleared | chosen


def _timed(env: dict[str, str], program: str, *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", program, *args], env=env, capture_output=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"market-analyst {' '.join(args)} failed: {done.stderr.decode()[-500:]}")
    return elapsed


def run(n: int) -> bool:
    """`n` threads each way, analysed then approved; True when both ratios are within the target."""
    each = f"{n} process{'' if n == 1 else 'es'} each"
    print(f"encryption: 'analyze' to the gate and 'approve', {each}, sealed against unsealed")
    times: dict[str, dict[str, list[float]]] = {"sealed": {}, "unsealed": {}}
    with tempfile.TemporaryDirectory(prefix="bench-encryption-") as tmp:
        env = _environment(Path(tmp) / "data")
        _timed(env, _SEALED, "analyze", "NVDA", "--thread-id", "warm-up")  # the server and master key made
        for i in range(n):
            for kind, program in (("sealed", _SEALED), ("unsealed", _PLAIN)):
                thread = f"{kind}-{i}"
                steps = times[kind]
                steps.setdefault("analyze", []).append(
                    _timed(env, program, "analyze", "NVDA", "--thread-id", thread, "--user", "ann")
                )
                approve = _timed(env, program, "approve", thread, "--user", "rev")
                steps.setdefault("approve", []).append(approve)
        discard_embedded_postgres(Settings.load(environ=env, dotenv=None).postgres_dir)
    ok = True
    for step in ("analyze", "approve"):
        sealed, unsealed = (statistics.median(times[k][step]) for k in ("sealed", "unsealed"))
        ratio = sealed / unsealed
        ok &= ratio <= TARGET
        verdict = "met" if ratio <= TARGET else "MISSED"
        print(
            f"  {step:<8} p50 sealed {sealed * 1000:7.1f} ms, unsealed {unsealed * 1000:7.1f} ms: "
            f"{ratio:.3f}x (target <= {TARGET}x, {verdict})"
        )
    return ok
