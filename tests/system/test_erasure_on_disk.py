"""Erasure that reaches the disk: after `forget` and `prune`, every byte under the data directory and
the embedded PostgreSQL's folder (heap, WAL, statistics), or Redis's AOF, is read for the erased
texts. Checkpoints are sealed under their thread's data key, so the database never holds them in
clear; erasing the key leaves copies that no longer decrypt, which the test shows by trying.

Each backend runs on a store of the test's own: the embedded PostgreSQL inside the data directory
(with the records, archive and audit log included, in files or in the database), a PostgreSQL server
of its own reached by `POSTGRES_URL` (an external server: nothing compacts it, so its WAL and dead
tuples keep every sealed copy, useless without the erased key), or a Redis server whose AOF lives in
the test's folder.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from market_analyst.errors import SealedValueUnreadable
from market_analyst.persistence.postgres.embedded import discard_embedded_postgres, embedded_postgres_uri
from tests.support.cli import Cli, clean_environ
from tests.support.sealed import sealed_copies
from tests.support.services import RedisServer


def _marker(what: str) -> str:
    """A text no other test, model or price file could write."""
    return f"{what}-{secrets.token_hex(6)}"


def _files(*roots: Path) -> Iterator[Path]:
    seen: set[Path] = set()
    for root in roots:
        for path in [root, *root.rglob("*")]:
            real = path.resolve()
            if real.is_file() and real not in seen:
                seen.add(real)
                yield real


def _found(texts: list[str], *roots: Path) -> dict[str, list[str]]:
    """Each text with every file holding it in clear (UTF-8, as every store writes text)."""
    found = _found_bytes([text.encode() for text in texts], *roots)
    return {text.decode(): paths for text, paths in found.items()}


def _found_bytes(needles: list[bytes], *roots: Path) -> dict[bytes, list[str]]:
    hits: dict[bytes, list[str]] = {}
    for path in _files(*roots):
        try:
            data = path.read_bytes()
        except OSError:
            continue  # a socket or a file removed while the walk passed
        for needle in needles:
            if needle in data:
                hits.setdefault(needle, []).append(str(path))
    return hits


@pytest.fixture(params=["postgres", "postgres-records", "external", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path, harness: Any) -> Iterator[tuple[Cli, list[Path]]]:
    """A CLI on its own store, and the folders that store writes to: the data directory, then the
    checkpointer's own."""
    data = tmp_path / "data"
    env = clean_environ() | {"MA_DATA_DIR": str(data)}
    if request.param.startswith("postgres"):
        records = {"MA_RECORDS": "postgres"} if request.param == "postgres-records" else {}
        cli = Cli(env=env | records, cwd=tmp_path, harness=harness)
        try:
            yield cli, [data, data / "postgres"]
        finally:
            cli.run("db", "stop")
        return
    if request.param == "external":
        base = Path(tempfile.mkdtemp(prefix="ma-test-external-pg-"))
        pgdata = base / "data"
        uri = embedded_postgres_uri(pgdata)
        try:
            yield Cli(env=env | {"POSTGRES_URL": uri}, cwd=tmp_path, harness=harness), [data, pgdata]
        finally:
            discard_embedded_postgres(pgdata)
            shutil.rmtree(base, ignore_errors=True)
        return
    server = RedisServer(tmp_path / "redis").start()
    try:
        redis = {"MA_CHECKPOINTER": "redis", "REDIS_URL": server.url}
        cli = Cli(env=env | redis, cwd=tmp_path, harness=harness)
        yield cli, [data, server.data_dir]
    finally:
        server.stop()


def _sealed_copies(cli: Cli, thread_ids: list[str]) -> list[tuple[str, bytes]]:
    return sealed_copies(cli.env, thread_ids)


def _open(cli: Cli, copies: list[tuple[str, bytes]]) -> list[Any]:
    """Each copy opened by a fresh process's keyring: the value, or the refusal it met."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from market_analyst.deps import open_keyring
    from market_analyst.persistence.checkpoints.sealing import SealingSerializer
    from market_analyst.settings import Settings

    serde = SealingSerializer(JsonPlusSerializer(), open_keyring(Settings.load(environ=cli.env, dotenv=None)))
    opened: list[Any] = []
    for copy in copies:
        try:
            opened.append(serde.loads_typed(copy))
        except SealedValueUnreadable as exc:
            opened.append(exc)
    return opened


def test_forget_leaves_no_erased_text_in_clear_and_its_sealed_copies_no_longer_decrypt(
    store: tuple[Cli, list[Path]],
):
    cli, roots = store
    ann = {k: _marker(k) for k in ("annprofile", "annmemory", "annquestion", "annnote", "annfeedback")}
    bob = {k: _marker(k) for k in ("bobprofile", "bobquestion", "bobnote")}

    cli.ok("profile", "set", "--user", "ann", "--risk-tolerance", "moderate", "--notes", ann["annprofile"])
    cli.ok("remember", ann["annmemory"], "--user", "ann", "--ticker", "NVDA")
    asked = cli.ok("analyze", "NVDA", "--user", "ann", "-q", ann["annquestion"], "--json")
    published = asked.json()["thread_id"]
    cli.ok("approve", published, "--user", "rev", "--note", ann["annnote"])
    waiting = cli.ok("analyze", "MSFT", "--user", "ann", "--json").json()["thread_id"]
    cli.ok("revise", waiting, "--user", "rev", "--feedback", ann["annfeedback"])

    cli.ok("profile", "set", "--user", "bob", "--risk-tolerance", "aggressive", "--notes", bob["bobprofile"])
    bobs = cli.ok("analyze", "AAPL", "--user", "bob", "-q", bob["bobquestion"], "--json").json()["thread_id"]
    cli.ok("approve", bobs, "--user", "rev", "--note", bob["bobnote"])
    bob_before = cli.ok("status", bobs, "--json").json()
    bob_history = cli.ok("history", bobs, "--json").json()

    # Checkpoints hold no text in clear, even before any erasure: only the other stores do.
    if "MA_RECORDS" not in cli.env:
        assert _found([*ann.values(), *bob.values()], roots[1]) == {}
    copies = _sealed_copies(cli, [published, waiting])
    assert copies and all("+ma-aes-gcm." in kind for kind, _ in copies)
    assert not any(isinstance(value, Exception) for value in _open(cli, copies))  # they open now

    done = cli.ok("forget", "--user", "ann", "--yes", "--json").json()
    assert sorted(done["threads"]) == sorted([published, waiting]) and done["data_keys"] == 2

    assert _found(list(ann.values()), *roots) == {}
    opened = _open(cli, copies)  # the copies may still be on disk (or in the AOF); their key is gone
    assert opened and all(isinstance(value, SealedValueUnreadable) for value in opened)
    residue = _found_bytes([blob[12:60] for _, blob in copies if len(blob) >= 60], roots[1])
    if "POSTGRES_URL" in cli.env:  # nothing compacts an external server: its files keep the ciphertext
        assert residue
    elif "MA_CHECKPOINTER" not in cli.env:  # the embedded server was compacted: not even that is left
        assert residue == {}

    # Bob's thread and words are untouched, and still read.
    assert cli.ok("status", bobs, "--json").json() == bob_before
    assert cli.ok("history", bobs, "--json").json() == bob_history
    assert set(_found(list(bob.values()), *roots)) == {bob["bobprofile"], bob["bobquestion"], bob["bobnote"]}


def test_prune_leaves_the_pruned_threads_copies_sealed_under_an_erased_key(store: tuple[Cli, list[Path]]):
    """`prune` keeps the published report (the archive is the record) but erases the thread: its
    checkpoints were never in clear, and what copies remain no longer decrypt."""
    cli, roots = store
    feedback = _marker("prunedfeedback")
    thread = cli.ok("analyze", "NVDA", "--user", "ann", "--json").json()["thread_id"]
    cli.ok("revise", thread, "--user", "rev", "--feedback", feedback)
    cli.ok("approve", thread, "--user", "rev")
    kept = cli.ok("analyze", "MSFT", "--user", "ann", "--json").json()["thread_id"]  # waiting: kept
    copies = _sealed_copies(cli, [thread])
    assert copies and not any(isinstance(value, Exception) for value in _open(cli, copies))

    pruned = cli.ok("prune", "--finished-before", "0s", "--yes", "--json").json()
    assert [row["thread_id"] for row in pruned["threads"]] == [thread]
    if "MA_RECORDS" not in cli.env:  # else the report and the audit log, kept, are in that database
        assert _found([feedback], roots[1]) == {}
    opened = _open(cli, copies)
    assert all(isinstance(value, SealedValueUnreadable) for value in opened)
    assert cli.ok("status", kept, "--json").json()["status"] == "awaiting_approval"
    assert not any(isinstance(v, Exception) for v in _open(cli, _sealed_copies(cli, [kept])))


def test_forget_including_said_by_takes_her_words_out_of_other_users_records(store: tuple[Cli, list[Path]]):
    """ann reviewed bob's thread: her feedback and her approval note are in his thread (its later
    draft, its model turns), in his memories (and so in a draft that recalled them), and in his
    archived report. `forget` counts them and leaves them; with `--including-said-by` they are gone
    from every byte, his thread's older copies no longer decrypt, and the rest of his is unchanged."""
    cli, roots = store
    feedback, note, own = _marker("annfeedback"), _marker("annnote"), _marker("bobownnote")
    untouched = cli.ok("analyze", "MSFT", "--user", "bob", "--json").json()["thread_id"]
    cli.ok("approve", untouched, "--user", "rev", "--note", own)
    untouched_before = cli.ok("history", untouched, "--json").json()
    reviewed = cli.ok("analyze", "NVDA", "--user", "bob", "--json").json()["thread_id"]
    cli.ok("revise", reviewed, "--user", "ann", "--feedback", f"Say more about {feedback} please")
    cli.ok("approve", reviewed, "--user", "ann", "--note", note)
    recalled = cli.ok("analyze", "NVDA", "--user", "bob", "--json").json()["thread_id"]  # recalls both
    assert set(_found([feedback, note], *roots)) == {feedback, note}  # the memories and the report
    copies = _sealed_copies(cli, [reviewed, recalled])
    assert not any(isinstance(value, Exception) for value in _open(cli, copies))

    left = cli.ok("forget", "--user", "ann", "--yes")
    assert "their words in other users' records (left as they are): 2 thread(s)" in left.stdout
    assert "--including-said-by" in left.stdout
    assert set(_found([feedback, note], *roots)) == {feedback, note}  # nothing of bob's was changed

    done = cli.ok("forget", "--user", "ann", "--including-said-by", "--yes", "--json").json()
    said = done["said_by"]
    assert done["said_by_redacted"] and sorted(said["threads"]) == sorted([reviewed, recalled])
    assert said["memories"] == 2 and len(said["reports"]) == 1

    assert _found([feedback, note], *roots) == {}
    opened = _open(cli, copies)  # his threads were re-keyed: the copies sealed before are noise now
    assert opened and all(isinstance(value, SealedValueUnreadable) for value in opened)
    report = cli.ok("reports", "show", said["reports"][0], "--json").json()
    assert report["approved_by"] == "ann" and "[redacted" in report["approval_note"]
    assert "[redacted" in cli.ok("status", reviewed, "--json").stdout
    audit = cli.ok("audit", "list", "--json").json()
    redacted = [entry for entry in audit if entry["action"] == "redacted"]
    assert len(redacted) == 1 and "became" in redacted[0]["note"]
    cli.ok("audit", "verify")

    # bob's other thread is as it was; his pending one quoted her erased memories, so it is revised
    # (without them) before it is published.
    assert cli.ok("history", untouched, "--json").json() == untouched_before
    assert set(_found([own], *roots)) == {own}
    refused = cli.run("approve", recalled, "--user", "rev")
    assert refused.returncode == 2 and "since erased" in refused.stderr
    cli.ok("revise", recalled, "--user", "rev", "--feedback", "Again, please")
    cli.ok("approve", recalled, "--user", "rev")
    assert cli.ok("status", recalled, "--json").json()["status"] == "published"
    assert _found([feedback, note], *roots) == {}
    again = cli.ok("forget", "--user", "ann", "--including-said-by", "--yes", "--json").json()
    why = {thread: cli.run("status", thread).stderr.strip() for thread in again["said_by"]["unreadable"]}
    assert again["said_by"] == {"threads": [], "memories": 0, "reports": [], "busy": [], "unreadable": []}, (
        why
    )


DAY = 86_400
T0 = 1_700_000_000


def test_erased_memories_leave_no_text_in_clear_in_the_threads_and_reports_that_quoted_them(
    store: tuple[Cli, list[Path]],
):
    """Two of bob's memories were recalled by a published report and by a pending draft. `memories
    forget` takes the one out of both (the report keeps its key, the audit log its hashes), and
    `prune --memories-older-than` the other; after each, the text is in no byte in clear, and the
    copies of his threads sealed before no longer decrypt: they were re-keyed."""
    cli, roots = store
    at, later = {"SOURCE_DATE_EPOCH": str(T0)}, {"SOURCE_DATE_EPOCH": str(T0 + 400 * DAY)}
    forgotten, pruned = _marker("forgottenmemory"), _marker("prunedmemory")
    old = cli.ok(
        "remember", f"supplier {pruned} worries me", "--user", "bob", "--ticker", "NVDA", extra_env=at
    )
    new = cli.ok(
        "remember",
        f"margin {forgotten} matters",
        "--user",
        "bob",
        "--ticker",
        "NVDA",
        "--json",
        extra_env=later,
    )
    assert old.returncode == 0
    published = cli.ok("analyze", "NVDA", "--user", "bob", "--json", extra_env=later).json()["thread_id"]
    cli.ok("approve", published, "--user", "rev", extra_env=later)
    pending = cli.ok("analyze", "NVDA", "--user", "bob", "--json", extra_env=later).json()["thread_id"]
    assert set(_found([forgotten, pruned], *roots)) == {forgotten, pruned}
    copies = _sealed_copies(cli, [published, pending])
    assert copies and not any(isinstance(value, Exception) for value in _open(cli, copies))

    done = cli.ok("memories", "forget", new.json()["id"], "--user", "bob", "--json", extra_env=later).json()
    assert sorted(done["threads"]) == sorted([published, pending]) and len(done["reports"]) == 1
    assert _found([forgotten], *roots) == {}
    assert all(isinstance(value, SealedValueUnreadable) for value in _open(cli, copies))
    copies = _sealed_copies(cli, [published, pending])
    assert copies and not any(isinstance(value, Exception) for value in _open(cli, copies))

    swept = cli.ok("prune", "--memories-older-than", "365d", "--yes", "--json", extra_env=later).json()
    assert swept["memories"] == 1 and sorted(swept["quoted_in"]["threads"]) == sorted([published, pending])
    assert _found([pruned, forgotten], *roots) == {}
    assert all(isinstance(value, SealedValueUnreadable) for value in _open(cli, copies))
    audit = cli.ok("audit", "list", "--json").json()
    assert len([entry for entry in audit if entry["action"] == "redacted"]) == 2
    cli.ok("audit", "verify")
    assert cli.ok("status", published, "--json").json()["status"] == "published"
    assert cli.ok("reports", "show", done["reports"][0], "--json").json()["thread_id"] == published
    assert "since erased" in cli.fails("approve", pending, "--user", "rev", extra_env=later).stderr
