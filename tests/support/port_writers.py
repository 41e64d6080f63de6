"""Writers for the ports' conformance suites: each runs in a child process of its own (forked by the
`harness`, `Harness.call_together`), against the records backend its settings name, and returns what
it wrote for the test to find again.

`RECORDS` are the backends of the records ports (approvers, sessions, sign-in failures, the audit
log): the data directory's files, and the PostgreSQL records database (`MA_RECORDS=postgres`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from market_analyst.settings import Settings
from tests.support import SHARED_RECORDS

RECORDS = ("files", "postgres")


def records_environ(backend: str, data_dir: Path, postgres_url: str) -> dict[str, str]:
    """The settings that put the records ports on `backend`."""
    environ = {"MA_DATA_DIR": str(data_dir)}
    if backend == "postgres":
        environ |= {"POSTGRES_URL": postgres_url, **SHARED_RECORDS}
    return environ


def records_settings(environ: dict[str, str]) -> Settings:
    return Settings.load(environ=environ, dotenv=None)


def append_events(environ: dict[str, str], worker: str, each: int) -> None:
    """Append `each` events for this worker, one of them twice."""
    from market_analyst.deps import open_audit
    from market_analyst.ports import AuditEvent

    log = open_audit(records_settings(environ))
    for n in range(each):
        log.append(
            AuditEvent(
                event_id=f"{worker}:{n}", action="approved", at="2026-01-01T00:00:00+00:00",
                thread_id=f"t-{worker}", actor=f"user-{worker}", note=f"note {n}",
            )
        )  # fmt: skip
        if n == 10:  # a repeat of an event already logged is kept once
            log.append(
                AuditEvent(event_id=f"{worker}:{n}", action="approved", at="2026-01-01T00:00:00+00:00")
            )


def add_and_remove_approvers(environ: dict[str, str], worker: str) -> dict[str, Any]:
    """Add eight approvers and remove every second; ask for the session secret three times."""
    from market_analyst.deps import open_approvers

    store = open_approvers(records_settings(environ))
    tokens = {}
    for n in range(8):
        name = f"{worker}-{n}"
        tokens[name] = store.add(name, "2026-01-01T00:00:00+00:00")
        if n % 2:
            assert store.remove(name)
            del tokens[name]
    secrets = {store.session_secret() for _ in range(3)}
    assert len(secrets) == 1
    return {"tokens": tokens, "secret": secrets.pop()}


def create_and_revoke_sessions(environ: dict[str, str], worker: str, each: int) -> dict[str, list[str]]:
    """Create `each` sessions, use each, and revoke every third (a use after that revives nothing)."""
    from market_analyst.deps import open_sessions

    store = open_sessions(records_settings(environ))
    made, revoked = [], []
    for n in range(each):
        _, record = store.create(name=worker, token_id=f"t-{worker}", client=f"10.0.0.{n}", now=time.time())
        made.append(record.key)
        store.touch(record.key, time.time())
        if n % 3 == 0:
            assert store.revoke(record.key)
            assert store.touch(record.key, time.time()) is None  # a use after revocation revives nothing
            revoked.append(record.key)
    return {"made": made, "revoked": revoked}


def count_failures(environ: dict[str, str], worker: str, each: int, counter: str) -> None:
    """Count `each` failed sign-ins on a shared key and on one of this worker's own, and take `each`
    turns at a read-pause-write of the `counter` file, which only one process at a time may do."""
    from market_analyst.deps import open_sign_in_limits

    limits = open_sign_in_limits(records_settings(environ), limit=10**6, window=3600)
    path = Path(counter)
    for _ in range(each):
        limits.failed("shared", time.time())
        limits.failed(f"own:{worker}", time.time())
        with limits.turn("counter"):
            value = int(path.read_text()) if path.exists() else 0
            time.sleep(0.001)
            path.write_text(str(value + 1))


# A store's migrations as a later test release would carry them: a seed row in version 1 shows a
# migration that ran twice (two rows), an index in version 2 shows one applied on top.
PROBE_MIGRATIONS = [
    "CREATE TABLE probe (n integer NOT NULL); INSERT INTO probe VALUES (1)",
    "CREATE INDEX probe_n ON probe (n); INSERT INTO probe VALUES (2)",
]


def open_probe_records(postgres_url: str, versions: int, data_dir: str) -> int:
    """Open the records database for a `probe` store with its first `versions` migrations; return
    the rows its table holds."""
    from market_analyst.deps import postgres_server
    from market_analyst.persistence.postgres.records import records_connection

    settings = Settings.load({"POSTGRES_URL": postgres_url, "MA_DATA_DIR": data_dir}, dotenv=None)
    with records_connection(postgres_server(settings), "probe", PROBE_MIGRATIONS[:versions]) as conn:
        return int(conn.execute("SELECT count(*) AS n FROM probe").fetchone()["n"])


def make_data_keys(environ: dict[str, str], worker: str, shared: list[str], own: int) -> dict[str, str]:
    """Ask for the data key of every shared thread and of `own` threads of this worker's (made under
    owner `worker`), sealing and opening a value under each; the key ID each thread got."""
    from market_analyst.deps import open_keyring
    from market_analyst.persistence.checkpoints.sealing import Sealed, SealingSerializer

    keyring = open_keyring(records_settings(environ))
    keyring.owner_of = lambda thread: thread.split("/")[0]
    serde = SealingSerializer(_plain_serde(), keyring)
    got = {}
    for thread in [*shared, *(f"{worker}/{n}" for n in range(own))]:
        cipher = keyring.cipher_for(thread)
        sealed = serde.dumps_typed(Sealed({"said": f"{worker} on {thread}"}, cipher))
        assert serde.loads_typed(sealed) == {"said": f"{worker} on {thread}"}
        got[thread] = cipher.key_id
    return got


def _plain_serde() -> Any:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer()


def open_sealed(environ: dict[str, str], sealed: list[tuple[str, bytes]]) -> list[str]:
    """Open each sealed value in this process: its content, or the one line that refused it."""
    from market_analyst.deps import open_keyring
    from market_analyst.errors import UserError
    from market_analyst.persistence.checkpoints.sealing import SealingSerializer

    serde = SealingSerializer(_plain_serde(), open_keyring(records_settings(environ)))
    opened = []
    for value in sealed:
        try:
            opened.append(str(serde.loads_typed(value)))
        except UserError as exc:
            opened.append(f"refused: {exc}")
    return opened


def rekey_data_keys(environ: dict[str, str], shared: list[str]) -> list[bool]:
    """Stage a new key for every shared thread and promote it, as a re-keying does (without the
    thread's lease, which would keep the others out): whether each promotion found its key staged."""
    from market_analyst.deps import open_keyring

    keyring = open_keyring(records_settings(environ))
    keyring.owner_of = lambda thread: thread.split("/")[0]
    promoted = []
    for thread in shared:
        keyring.stage(thread)
        promoted.append(keyring.promote(thread))
    return promoted


def redact_phrase(environ: dict[str, str], key: str, phrase: str) -> list[str]:
    """Take `phrase` out of the archived report `key`'s Markdown, as an erasure does: the old and new
    SHA-256 the archive recorded, or [] when it found nothing to change."""
    from market_analyst.deps import open_archive

    recorded: list[str] = []

    def change(document: dict[str, Any]) -> dict[str, Any]:
        return {**document, "markdown": document["markdown"].replace(phrase, "[redacted]")}

    archive = open_archive(records_settings(environ))
    archive.redact(key, change, lambda old, new: recorded.extend([old, new]))
    return recorded


def hold_and_release_memories(environ: dict[str, str], worker: int) -> dict[str, Any]:
    """Mark ten threads of this worker's as waiting for the memory store, release every other one,
    and hold one thread all workers share (under its lease, as a command does) from entry `worker`."""
    from market_analyst.deps import open_checkpointer
    from market_analyst.errors import ThreadBusy

    settings = Settings.load(environ=environ, dotenv=None)
    kept = []
    with open_checkpointer(settings) as backend:
        for n in range(10):
            thread = f"outbox-w{worker}-{n}"
            token = backend.index.hold_memories(thread, n)
            if n % 2 and backend.index.release_memories(thread, token):
                continue
            kept.append(thread)
        while True:
            try:
                with backend.lease("outbox-shared"):
                    backend.index.hold_memories("outbox-shared", worker)
                break
            except ThreadBusy:
                time.sleep(0.01)
    return {"kept": kept}


def append_or_verify(environ: dict[str, str], worker: str, each: int) -> dict[str, Any]:
    """A writer (`append_events`), or, as worker "verify", a reader that verifies the log over and
    over while the writers append: at least `each` times and until it has seen every writer's
    entries (`total` in the environment); what each verify said that was not "one chain"."""
    from market_analyst.deps import open_audit

    if worker != "verify":
        append_events(environ, worker, each)
        return {}
    log = open_audit(records_settings(environ))
    total = int(environ["MA_TEST_AUDIT_TOTAL"])
    runs, seen, problems, deadline = 0, 0, [], time.monotonic() + 90
    while time.monotonic() < deadline and not (runs >= each and seen >= total):
        found = log.verify()
        runs, seen = runs + 1, found.entries
        if found.problem is not None:
            problems.append(f"{found.entries} entries: {found.problem}")
    return {"runs": runs, "problems": problems, "entries": seen}
