"""The command line under generated input: tickers, thread IDs, user IDs, archive keys, profile fields
and settings drawn by Hypothesis, run through the real CLI against real stores. Every run exits 0 or 2,
prints at most one line on stderr and no traceback, and a command that fails changes no store.

`make fuzz` runs many more examples (FUZZ_EXAMPLES)."""

from __future__ import annotations

import hashlib
import os
import string

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.cli import Cli, clean_environ
from tests.support.make import run_make
from tests.support.services import OUTER_POSTGRES_SERVER

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))

# Text a hostile user types: valid characters, path tricks, shell and terminal metacharacters, unicode.
NASTY = st.text(
    alphabet=string.ascii_letters + string.digits + "._-@:/\\$ '\"\n\t\x1b\x9b\xe9\u2211", max_size=30
)
TICKERS = st.one_of(st.sampled_from(["NVDA", "msft", "NFLX ", "SPX", "ZZZZ", "BRK-B", "../x", ""]), NASTY)
USERS = st.one_of(st.sampled_from(["ann", "bob@example.com", "a" * 64, "a" * 65, "-x", ""]), NASTY)
CHOICES = {
    "MA_DURABILITY": ["sync", "async", "exit", "ASYNC", "sometimes", ""],
    "MA_LEASE_TTL_SECONDS": ["30", "1", "86400", "0", "-5", "nan", "inf", "1e9", "abc", ""],
    "SOURCE_DATE_EPOCH": ["1739577600", "0", "-1", "99999999999999999", "soon", ""],
    "MA_ANALYST": ["rules", "auto", "llm", "psychic", ""],
    "MA_MARKET_DATA": ["snapshot", "csv", "carrier-pigeon", ""],
    "MA_USER": ["ann", "", "a b", "x" * 70],
    "MA_APPROVERS": ["", "ann,bob", ",,,", "a b"],
    "MA_REDIS_SHALLOW": ["true", "false", "maybe", ""],
}


@st.composite
def commands(draw: st.DrawFn, thread_ids: list[str], keys: list[str]) -> list[str]:
    thread = draw(st.one_of(st.sampled_from(thread_ids), NASTY))
    user = draw(USERS)
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return ["analyze", draw(TICKERS), "--user", user, "--question", draw(NASTY)]
    if kind == 1:
        return ["status", thread]
    if kind == 2:
        return ["approve", thread, "--user", user, "--note", draw(NASTY)]
    if kind == 3:
        return ["reject", thread, "--reason", draw(NASTY)]
    if kind == 4:
        return ["revise", thread, "--feedback", draw(NASTY)]
    if kind == 5:
        return ["reports", "show", draw(st.one_of(st.sampled_from(keys), NASTY))]
    if kind == 6:
        return ["reports", "search", draw(NASTY), "--user", user]
    if kind == 7:
        fields = ["--risk-tolerance", draw(st.sampled_from(["conservative", "aggressive", "yolo", ""]))]
        fields += ["--horizon", draw(st.sampled_from(["short", "long", "forever"]))]
        return ["profile", "set", "--user", user, *fields, "--sectors", draw(NASTY), "--notes", draw(NASTY)]
    if kind == 8:
        return ["profile", draw(st.sampled_from(["show", "delete"])), "--user", user]
    return ["resume", thread]


def _fingerprint(cli: Cli) -> tuple[object, ...]:
    """What the stores hold: checkpoint rows, archive documents, profile files (without lock files)."""
    with psycopg.connect(cli.env["POSTGRES_URL"]) as conn:
        rows = conn.execute(
            "SELECT (SELECT count(*) FROM checkpoints), (SELECT count(*) FROM checkpoint_writes)"
        ).fetchone()
    files = []
    for root in (cli.data_dir / "reports", cli.data_dir / "profiles"):
        for path in sorted(root.rglob("*")) if root.is_dir() else []:
            if path.is_file() and not path.name.startswith((".lock", ".index")):
                files.append((str(path), hashlib.sha256(path.read_bytes()).hexdigest()))
    return rows, tuple(files)


def _seed(cli: Cli) -> tuple[list[str], list[str]]:
    """A thread at the gate, a published one and its key: targets worth hitting."""
    waiting = cli.ok("analyze", "NVDA", "--json").json()["thread_id"]
    done = cli.ok("analyze", "MSFT", "--json").json()["thread_id"]
    key = cli.ok("approve", done, "--json").json()["publication"]["key"]
    return [waiting, done], [key]


def test_generated_commands_exit_0_or_2_with_one_line_and_fail_without_changing_a_store(cli: Cli):
    thread_ids, keys = _seed(cli)

    @given(command=commands(thread_ids, keys), env=st.fixed_dictionaries({}, optional=_env_strategies()))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def check(command: list[str], env: dict[str, str]) -> None:
        before = _fingerprint(cli)
        result = cli.run(*command, extra_env=env)
        note = f"{command} {env}: exit {result.returncode}\n{result.stderr}"
        assert result.returncode in (0, 2), note
        assert "Traceback" not in result.stderr, note
        assert len(result.stderr.strip().splitlines()) <= 1, note
        if result.returncode != 0:
            assert _fingerprint(cli) == before, note

    check()


def _env_strategies() -> dict[str, st.SearchStrategy[str]]:
    return {name: st.sampled_from(values) for name, values in CHOICES.items()}


def test_make_fuzz_runs_the_fuzz_test(postgres_server: str):
    """The README's `make fuzz`, cut down to one example, on this session's PostgreSQL server."""
    env = clean_environ() | {OUTER_POSTGRES_SERVER: postgres_server}
    result = run_make("fuzz", "FUZZ_EXAMPLES=1", env=env, timeout=300)
    assert "1 passed" in result.stdout
