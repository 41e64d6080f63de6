"""A damaged memory store says so and destroys nothing.

Every file of a real Qdrant Edge shard is cut to half its size, then to nothing, one at a time, and
the store is then read, written and erased from: each case is either no effect (every memory of every
user as it was) or a refusal in one line (`StoreDamaged`, exit 2 on the command line) with nothing
written or erased: `memories restore` brings back the copy the last change that passed its check
left, and it holds every memory of every user, and nothing a refused command tried. A damaged
shard with 10,000 memories refuses an erasure that would otherwise have rebuilt the store from what
the engine still sees."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from market_analyst.files import copy_sparse_tree
from market_analyst.persistence.memory.edge import EdgeMemoryStore
from market_analyst.persistence.memory.embedder import WordLlamaEmbedder
from market_analyst.persistence.memory.manifest import StoreDamaged
from market_analyst.state import Memory, memory_id
from tests.support.cli import Cli

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
OWNERS = ("ann", "bob", "cy")


def _memory(owner: str, n: int, text: str | None = None) -> Memory:
    return Memory(
        id=memory_id("remembered", owner, str(n)),
        owner=owner,
        kind="remembered",
        text=text or f"{owner} note {n}: watch supplier concentration and margins",
        ticker="NVDA",
        created_at=NOW - timedelta(days=n),
        said_by=owner,
        verified=False,
    )


@pytest.fixture(scope="module")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


def _held(store: EdgeMemoryStore) -> dict[str, set[str]]:
    return {owner: {m.id for m in store.list(owner, include_superseded=True)} for owner in OWNERS}


def _shard_files(store: EdgeMemoryStore) -> list[Path]:
    return sorted(path for path in store.shard_path.rglob("*") if path.is_file())


def _cut(path: Path, how: str) -> None:
    size = path.stat().st_size
    os.truncate(path, size // 2 if how == "half" else 0)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A folder in memory when there is one: the sweep copies the store 300 times."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="memory-damage-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# One test a cut, so that the two halves of the sweep (each over every shard file) run side by side.
@pytest.mark.parametrize("how", ["half", "zero"])
def test_every_shard_file_cut_to_half_or_nothing_is_no_effect_or_a_refusal(
    scratch: Path, embedder: WordLlamaEmbedder, how: str
) -> None:
    tmp_path = scratch
    store = EdgeMemoryStore(tmp_path / "memories", embedder=lambda: embedder)
    store.write([_memory(owner, n) for owner in OWNERS for n in range(12)])
    store.write([_memory(owner, n) for owner in OWNERS for n in range(12, 20)])
    assert store.forget("ann", _memory("ann", 0).id)  # a rewrite: the shard of a store in use
    store.replace("bob", _memory("bob", 1).id, _memory("bob", 99, "bob changed his mind on margins"))
    expected = _held(store)
    assert sum(map(len, expected.values())) == 3 * 20 - 1 + 1
    pristine = tmp_path / "pristine"
    copy_sparse_tree(store.path, pristine)
    files = [path.relative_to(store.path) for path in _shard_files(store)]
    assert len(files) >= 60, files  # the segment's files, its log, the manifest, the embedder record

    outcomes: Counter[str] = Counter()
    for relative in files:
        case = f"{relative} cut to {how}"
        shutil.rmtree(store.path)
        copy_sparse_tree(pristine, store.path)
        _cut(store.path / relative, how)
        refused, wrote, erased = [], False, False
        extra = _memory("cy", 500, f"one more note {len(outcomes)}")
        steps = [
            ("list", lambda: _held(store)),
            ("recall", lambda: store.recall("ann", "supplier concentration", ticker="NVDA", now=NOW)),
            ("write", lambda: store.write([extra])),  # noqa: B023
            ("forget", lambda: store.forget("bob", _memory("bob", 5).id)),
        ]
        for name, step in steps:
            try:
                result = step()
            except StoreDamaged as exc:
                message = str(exc)
                assert "\n" not in message and "memories check" in message, (case, message)
                refused.append(name)
                continue
            # Not refused: then it saw and did exactly what it should.
            if name == "list":
                assert result == expected, (case, "a read lost or invented memories")
            elif name == "write":
                wrote = True
            elif name == "forget":
                assert result is True, case
                erased = True
        after = expected | {"cy": expected["cy"] | ({extra.id} if wrote else set())}
        if erased:
            after["bob"] = after["bob"] - {_memory("bob", 5).id}
        if refused:
            outcomes["refused"] += 1
            report = store.check()
            assert not report["ok"] and report["problem"], case
            done = store.restore()
            assert done["restored"] and done["memories"] == sum(map(len, after.values())), (case, done)
            assert _held(store) == after, (case, "the copy lacks a memory")
            assert store.check()["ok"], case
            # The damaged shard is kept aside, not deleted (Edge replays its log into the segment
            # files at every opening, so it is not the bytes it was: the copy is what restores).
            assert len(list((store.path / "damaged").iterdir())) == 1, case
        else:
            outcomes["no effect"] += 1
            assert _held(store) == after, (case, "silent loss")
    print(f"{len(files)} files cut to {how}: {dict(outcomes)}")
    assert outcomes["refused"] >= 10 and outcomes["no effect"] >= 10, outcomes
    assert sum(outcomes.values()) == len(files)


def _bulk(owner_count: int, per_owner: int) -> list[Memory]:
    return [
        _memory(f"user{u:02d}", n, f"user{u:02d} memory {n} on supplier {n % 37} and margins")
        for u in range(owner_count)
        for n in range(per_owner)
    ]


def test_an_erasure_of_a_damaged_store_refuses_and_ten_thousand_memories_survive(
    cli: Cli, embedder: WordLlamaEmbedder
) -> None:
    """With the segment's ID mappings cut to nothing, the engine sees part of the points. An erasure
    then would have rebuilt the store from what it sees: it refuses in one line (exit 2), as does
    every other command, and `memories restore` brings back every one of the 10,000 memories."""
    from tests.journeys.test_memory_cli import _store

    store = _store(cli, embedder)
    memories = _bulk(20, 500)
    store.write(memories)
    target = memories[7]
    [mappings] = list(store.shard_path.glob("segments/*/mutable_id_tracker.mappings"))
    os.truncate(mappings, 0)

    for command in (
        ("memories", "forget", target.id, "--user", target.owner),
        ("memories", "list", "--user", target.owner),
        ("prune", "--memories-older-than", "30d", "--yes"),
        ("remember", "one more", "--user", target.owner),
    ):
        refused = cli.fails(*command)
        assert refused.returncode == 2, (command, refused.stderr)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "fails its check" in lines[0] and "memories check" in lines[0], lines
        assert "Traceback" not in refused.stderr
    checked = cli.fails("memories", "check")
    assert checked.returncode == 2 and "fails its check" in checked.stdout

    # The copy the write left holds them all; the engine's own view of the damaged shard is kept aside.
    restored = cli.ok("memories", "restore", "--json").json()
    assert restored["restored"] and restored["memories"] == 10_000 and restored["kept"]
    assert sum(len(store.list(f"user{u:02d}")) for u in range(20)) == 10_000
    assert "passes its check: 10000 memories" in cli.ok("memories", "check").stdout
    assert cli.ok("memories", "forget", target.id, "--user", target.owner).returncode == 0  # now it may
    assert sum(len(store.list(f"user{u:02d}")) for u in range(20)) == 9_999
    assert not (store.path / "damaged").exists()  # an erasure reaches the damaged copy too
