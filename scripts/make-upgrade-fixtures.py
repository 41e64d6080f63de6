"""Make the upgrade fixtures: threads left by a released version, written by that version's own code.

    .venv/bin/python scripts/make-upgrade-fixtures.py --ref <git ref>   # default: the newest tag

It checks the ref's `src/` out into a temporary directory (`git archive`), and runs that code with
this virtual environment's interpreter (`PYTHONPATH` pointing at the checkout: the dependencies are
the same) against a fresh embedded PostgreSQL database and a fresh Redis Stack server. On each
backend it leaves the threads an upgrade meets:

- `gate`: analysed, waiting at the approval gate;
- `revised`: revised once, waiting at the gate again with revision 2;
- `forked`: a fork of `gate` made at the gate (where the version has `fork`);
- `crashed`: an `analyze` killed with SIGKILL part-way, before the gate.

Then it exports what those versions stored, as text, into `tests/fixtures/upgrade/<version>/`:
`postgres/schema.sql` (`pg_dump --schema-only`) and one JSON line per row of each table
(`postgres/<table>.jsonl`, rows as `row_to_json`), `redis/keys.jsonl` (each key with its type and
value), and `fixture.json` (version, commit, thread IDs, where each thread stands). Tests load them
into a fresh database or server and decide the threads with the current code
(`tests/journeys/test_upgrade.py`, whose `FIXTURE_VERSIONS` lists the versions to test).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.cli import clean_environ  # noqa: E402
from tests.support.services import RedisServer, new_database, postgres_server  # noqa: E402

OUT = REPO / "tests" / "fixtures" / "upgrade"
THREADS = {
    "gate": "upgrade-gate",
    "revised": "upgrade-revised",
    "forked": "upgrade-forked",
    "crashed": "upgrade-crashed",
}
# Keys that only mean something while a command runs (a killed command's lease expires by itself).
TRANSIENT_REDIS_PREFIXES = ("market-analyst:lease:",)
# Run by the old version: the SQL its PostgreSQL backend runs to create the tables it uses.
SCHEMA_OF_OLD = """
import json
from langgraph.checkpoint.postgres import PostgresSaver
try:
    from market_analyst.persistence.checkpoints.thread_index import POSTGRES_SCHEMA
except ImportError:  # a version from before the thread index
    POSTGRES_SCHEMA = ()
print(json.dumps([*PostgresSaver.MIGRATIONS, *POSTGRES_SCHEMA]))
"""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def default_ref() -> str:
    """The newest release tag, which is what users run."""
    tag = subprocess.run(
        ["git", "describe", "--tags", "--abbrev=0"], cwd=REPO, capture_output=True, text=True
    )
    if tag.returncode != 0:
        sys.exit("no release tag here: name the released commit with --ref")
    return tag.stdout.strip()


def checkout(ref: str, into: Path) -> tuple[str, str]:
    """`ref`'s source tree in `into`; its commit and package version."""
    commit = git("rev-parse", f"{ref}^{{commit}}")
    archive = subprocess.run(
        ["git", "archive", commit, "src", "pyproject.toml"], cwd=REPO, check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    version = tomllib.loads((into / "pyproject.toml").read_text())["project"]["version"]
    return commit, version


class OldVersion:
    """The checked-out version's CLI, in a new interpreter per command."""

    def __init__(self, src: Path, env: dict[str, str], cwd: Path) -> None:
        self.env = env | {"PYTHONPATH": str(src)}
        self.cwd = cwd
        self.src = src
        self._commands: set[str] | None = None

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "market_analyst", *args]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.command(*args), env=self.env, cwd=self.cwd, capture_output=True, text=True, timeout=300
        )
        if proc.returncode != 0:
            raise SystemExit(
                f"{' '.join(args)} failed ({proc.returncode}) under the old version: {proc.stderr}"
            )
        return proc

    def has(self, command: str) -> bool:
        """Whether this version's CLI has `command` (fork came later than the rest)."""
        if self._commands is None:
            listing = self.run("--help").stdout
            self._commands = {
                line.split()[0] for line in listing.split("Commands:")[-1].splitlines() if line.strip()
            }
        return command in self._commands

    def status(self, thread_id: str) -> dict[str, Any]:
        return json.loads(self.run("status", thread_id, "--json").stdout)


def make_threads(old: OldVersion, checkpoints: Any) -> dict[str, dict[str, Any]]:
    """Leave the four kinds of thread; where each stands, as the old version reports it."""
    old.run("profile", "set", "--user", "ann", "--risk-tolerance", "conservative")
    old.run("analyze", "NVDA", "--user", "ann", "--thread-id", THREADS["gate"], "--question", "Hold or sell?")
    old.run("analyze", "MSFT", "--user", "ann", "--thread-id", THREADS["revised"])
    old.run("revise", THREADS["revised"], "--feedback", "say more about the drawdown")
    made = ["gate", "revised"]
    if old.has("fork"):
        history = json.loads(old.run("history", THREADS["gate"], "--json").stdout)
        old.run(
            "fork",
            THREADS["gate"],
            "--checkpoint",
            history[-1]["checkpoint_id"],
            "--thread-id",
            THREADS["forked"],
        )
        made.append("forked")
    crash(old, checkpoints)
    made.append("crashed")
    old.run("threads")  # the listing backfills and marks the index complete, as any operator's would
    return {kind: old.status(THREADS[kind]) for kind in made}


def crash(old: OldVersion, checkpoints: Any) -> None:
    """Kill an `analyze` with SIGKILL once it has saved a checkpoint past `load_profile` and before the
    gate: stopped (SIGSTOP) the moment the store shows that, then killed."""
    thread_id = THREADS["crashed"]
    for _attempt in range(20):
        proc = subprocess.Popen(
            old.command("analyze", "NFLX", "--user", "ann", "--thread-id", thread_id),
            env=old.env,
            cwd=old.cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while proc.poll() is None:
                if checkpoints(thread_id) >= 3:  # the input, __start__ and load_profile are saved
                    proc.send_signal(signal.SIGSTOP)
                    proc.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.002)
        finally:
            proc.kill()
            proc.wait()
        status = old.status(thread_id)
        if status["status"] == "in_progress":
            return
        erase(old, thread_id)  # reached the gate before the kill: try again
    raise SystemExit("could not kill analyze before the gate in 20 tries")


def erase(old: OldVersion, thread_id: str) -> None:
    old.run("forget", "--user", "ann", "--yes")
    old.run("profile", "set", "--user", "ann", "--risk-tolerance", "conservative")
    raise SystemExit(f"{thread_id} reached the gate before the kill; run the script again")


def export_postgres(uri: str, out: Path, old: OldVersion) -> None:
    import psycopg

    out.mkdir(parents=True)
    # The statements that made these tables, as the old version ran them: its saver's migrations
    # and its thread index (a dump of the catalog would need a pg_dump matching the server).
    statements = subprocess.run(
        [sys.executable, "-c", SCHEMA_OF_OLD],
        env=old.env,
        cwd=old.cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (out / "schema.sql").write_text(
        "".join(statement.strip() + ";\n\n" for statement in json.loads(statements))
    )
    with psycopg.connect(uri) as conn:
        tables = [
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
        ]
        for table in tables:
            rows = conn.execute(
                f"SELECT row_to_json(t)::text FROM {table} t ORDER BY row_to_json(t)::text"
            ).fetchall()
            (out / f"{table}.jsonl").write_text("".join(row[0] + "\n" for row in rows))


def export_redis(url: str, out: Path) -> None:
    import redis

    out.mkdir(parents=True)
    client = redis.Redis.from_url(url, decode_responses=True)
    lines = []
    for key in sorted(client.scan_iter(count=1000)):
        if key.startswith(TRANSIENT_REDIS_PREFIXES):
            continue
        kind = client.type(key)
        value: Any
        if kind == "ReJSON-RL":
            value = json.loads(client.execute_command("JSON.GET", key, "$"))[0]
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "string":
            value = client.get(key)
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = sorted(client.smembers(key))
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        else:
            raise SystemExit(f"key {key} has type {kind}, which this script does not export")
        ttl = client.pttl(key)
        lines.append(json.dumps({"key": key, "type": kind, "value": value, "pttl": ttl if ttl > 0 else None}))
    (out / "keys.jsonl").write_text("".join(line + "\n" for line in lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", help="the released commit or tag (default: the newest tag)")
    parser.add_argument("--out", type=Path, default=OUT, help="where <name>/ goes")
    parser.add_argument(
        "--name",
        help="the fixture's directory name (default: the package version; name a commit between releases)",
    )
    args = parser.parse_args()
    ref = args.ref or default_ref()
    work = Path(tempfile.mkdtemp(prefix="ma-upgrade-fixtures-"))
    runtime = work / "runtime"
    runtime.mkdir(mode=0o700)
    try:
        commit, version = checkout(ref, work)
        target = args.out / (args.name or version)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        manifest: dict[str, Any] = {
            "name": args.name or version,
            "version": version,
            "commit": commit,
            "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "threads": THREADS,
            "backends": {},
        }
        base = clean_environ() | {"XDG_RUNTIME_DIR": str(runtime), "MA_USER": "ann"}
        import psycopg

        with postgres_server() as server:
            uri = new_database(server, prefix="fixture_")
            old = OldVersion(
                work / "src", base | {"MA_DATA_DIR": str(work / "data-pg"), "POSTGRES_URL": uri}, work
            )
            with psycopg.connect(uri, autocommit=True) as conn:

                def pg_checkpoints(thread_id: str) -> int:
                    found = conn.execute("SELECT to_regclass('checkpoints') IS NOT NULL").fetchone()
                    if not found or not found[0]:
                        return 0
                    row = conn.execute(
                        "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,)
                    ).fetchone()
                    return int(row[0]) if row else 0

                manifest["backends"]["postgres"] = make_threads(old, pg_checkpoints)
            export_postgres(uri, target / "postgres", old)
        redis_server = RedisServer(work / "redis").start()
        try:
            import redis

            client = redis.Redis.from_url(redis_server.url)
            env = base | {
                "MA_DATA_DIR": str(work / "data-redis"),
                "MA_CHECKPOINTER": "redis",
                "REDIS_URL": redis_server.url,
            }
            old = OldVersion(work / "src", env, work)

            def redis_checkpoints(thread_id: str) -> int:
                return sum(1 for _ in client.scan_iter(f"checkpoint:{thread_id}:*", count=1000))

            manifest["backends"]["redis"] = make_threads(old, redis_checkpoints)
            export_redis(redis_server.url, target / "redis")
        finally:
            redis_server.stop()
        for stands in manifest["backends"].values():  # keep only what the tests compare
            for kind, view in stands.items():
                draft = view.get("draft") or {}
                stands[kind] = {
                    "status": view["status"],
                    "next": view["next"],
                    "revision": draft.get("revision"),
                }
        (target / "fixture.json").write_text(json.dumps(manifest, indent=2) + "\n")
        shown = target.relative_to(REPO) if target.is_relative_to(REPO) else target
        print(f"wrote {shown} from {ref} ({commit[:12]})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
