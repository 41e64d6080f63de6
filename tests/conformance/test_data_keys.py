"""The data-key store on every records backend (the data directory's files, the PostgreSQL records
database): several real processes asking for keys at once agree on one key a thread and lose none;
erasing an owner's keys takes theirs and only theirs; and each way the store or the master key can
be wrong is one line that names it, never a key made over another."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from market_analyst.deps import open_keyring
from market_analyst.errors import UserError
from market_analyst.persistence.checkpoints.sealing import Sealed, SealingSerializer
from market_analyst.persistence.keys.base import thread_digest
from tests.support.cli import Cli
from tests.support.crashkit import Harness
from tests.support.port_writers import (
    RECORDS,
    _plain_serde,
    make_data_keys,
    open_sealed,
    records_environ,
    records_settings,
    rekey_data_keys,
)

WRITERS = 6
SHARED = [f"shared/{n}" for n in range(12)]
OWN = 8


@pytest.fixture(params=RECORDS)
def environ(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""
    return records_environ(request.param, tmp_path / "data", url)


def _sealed(environ: dict[str, str], thread: str, value: object) -> tuple[str, bytes]:
    keyring = open_keyring(records_settings(environ))
    keyring.owner_of = lambda t: t.split("/")[0]
    return SealingSerializer(_plain_serde(), keyring).dumps_typed(Sealed(value, keyring.cipher_for(thread)))


def test_processes_asking_at_once_agree_on_one_key_a_thread_and_lose_none(
    environ: dict[str, str], harness: Harness
):
    got = harness.call_together(make_data_keys, [(environ, f"w{n}", SHARED, OWN) for n in range(WRITERS)])
    for thread in SHARED:  # every process sealed under the one key that won
        assert len({answer[thread] for answer in got}) == 1, thread
    stored = {key.thread_id: key for key in open_keyring(records_settings(environ)).store.keys()}
    assert set(stored) == set(SHARED) | {f"w{n}/{i}" for n in range(WRITERS) for i in range(OWN)}
    assert all(stored[t].key_id == got[0][t] for t in SHARED)
    assert all(stored[f"w{n}/{i}"].owner == f"w{n}" for n in range(WRITERS) for i in range(OWN))
    if "POSTGRES_URL" not in environ:  # one master key, made by whichever process came first
        data = Path(environ["MA_DATA_DIR"])
        assert len({key.master for key in stored.values()}) == 1
        assert (data / "master.key").stat().st_mode & 0o777 == 0o600
        files = list((data / "keys").iterdir())
        assert len(files) == len(stored) and all(f.stat().st_mode & 0o777 == 0o600 for f in files)
        assert not [f for f in files if f.name.startswith(".")]  # no half-written key left
    # A value sealed in one process opens in another.
    value = _sealed(environ, SHARED[0], {"note": "kept"})
    assert open_sealed(environ, [value]) == [str({"note": "kept"})]


def test_a_thread_re_keyed_opens_under_both_keys_until_the_new_one_is_promoted_then_only_under_it(
    environ: dict[str, str],
):
    old = _sealed(environ, "bob/1", "before")
    keyring = open_keyring(records_settings(environ))
    staged = keyring.stage("bob/1")
    assert keyring.stage("bob/1").key_id == staged.key_id  # a re-keying killed before it promoted
    assert open_keyring(records_settings(environ)).cipher_for("bob/1").key_id == staged.key_id
    new = _sealed(environ, "bob/1", "after")  # a run writing meanwhile writes under the staged key
    assert new[0].endswith(staged.key_id) and open_sealed(environ, [old, new]) == ["before", "after"]
    assert keyring.promote("bob/1") and not keyring.promote("bob/1")
    refused, kept = open_sealed(environ, [old, new])
    assert refused.startswith("refused: ") and "erased" in refused and kept == "after"
    assert [key.key_id for key in keyring.store.keys()] == [staged.key_id]
    keyring.stage("bob/1")
    assert keyring.forget_thread("bob/1") == 2  # the key and a staged one both go
    assert keyring.store.keys() == []


def test_processes_re_keying_at_once_leave_one_key_a_thread_and_nothing_staged(
    environ: dict[str, str], harness: Harness
):
    before = [_sealed(environ, thread, "old") for thread in SHARED]
    got = harness.call_together(rekey_data_keys, [(environ, SHARED) for _ in range(WRITERS)])
    assert all(len(answer) == len(SHARED) for answer in got)
    assert all(any(answer[n] for answer in got) for n in range(len(SHARED)))  # each was promoted
    stored = open_keyring(records_settings(environ)).store.keys()
    assert sorted(key.thread_id for key in stored) == sorted(SHARED)  # one key a thread, none staged
    assert all(line.startswith("refused: ") for line in open_sealed(environ, before))
    after = [_sealed(environ, thread, "new") for thread in SHARED]
    assert open_sealed(environ, after) == ["new"] * len(SHARED)
    if "POSTGRES_URL" not in environ:
        names = [path.name for path in (Path(environ["MA_DATA_DIR"]) / "keys").iterdir()]
        assert len(names) == len(SHARED) and not [n for n in names if n.startswith(".") or ".next" in n]


def test_erasing_an_owner_takes_their_keys_only_and_their_values_stop_opening(environ: dict[str, str]):
    theirs = _sealed(environ, "ann/1", "ann's words")
    others = _sealed(environ, "bob/1", "bob's words")
    keyring = open_keyring(records_settings(environ))
    assert keyring.forget_owner("ann") == 1
    assert keyring.forget_owner("ann") == 0  # run again, nothing more goes
    refused, kept = open_sealed(environ, [theirs, others])
    assert refused.startswith("refused: ") and "does not hold" in refused and "erased" in refused
    assert kept == "bob's words"
    again = _sealed(environ, "ann/1", "a new run")  # a thread made again gets a new key
    assert again[0] != theirs[0] and open_sealed(environ, [theirs]) == [refused]


def test_a_damaged_key_or_another_master_key_is_one_line_and_nothing_is_made_over_it(
    tmp_path: Path,
):
    environ = records_environ("files", tmp_path / "data", "")
    value = _sealed(environ, "ann/1", "words")
    data = tmp_path / "data"
    [key_file] = (data / "keys").iterdir()
    assert key_file.name == f"{thread_digest('ann/1')}.json"

    other = environ | {"MA_MASTER_KEY": base64.b64encode(os.urandom(32)).decode()}
    [refused] = open_sealed(other, [value])
    assert "wrapped by another master key" in refused and "MA_MASTER_KEY" in refused
    with pytest.raises(UserError, match="wrapped by another master key"):
        _sealed(other, "ann/1", "more")  # writing under another master key is refused, not re-keyed
    assert open_sealed(environ, [value]) == ["words"]

    stored = json.loads(key_file.read_text())
    flipped = bytearray(base64.b64decode(stored["wrapped"]))
    flipped[-1] ^= 1
    key_file.write_text(json.dumps(stored | {"wrapped": base64.b64encode(bytes(flipped)).decode()}))
    [damaged] = open_sealed(environ, [value])
    assert "is damaged" in damaged
    key_file.write_text("{not json")
    [unreadable] = open_sealed(environ, [value])
    assert "unreadable" in unreadable and str(key_file) in unreadable
    assert [p.name for p in (data / "keys").iterdir()] == [key_file.name]  # nothing made beside it

    key_file.write_text(json.dumps(stored))  # whole again
    for bad in ("short", base64.b64encode(b"x" * 16).decode()):
        [line] = open_sealed(environ | {"MA_MASTER_KEY": bad}, [value])
        assert "MA_MASTER_KEY is not a master key" in line and "base64" in line
    (data / "master.key").chmod(0o644)
    with pytest.raises(UserError, match="readable by others"):
        _sealed(environ, "ann/3", "x")


def test_a_shared_records_database_without_a_master_key_is_refused_before_anything_is_written(cli: Cli):
    env = {"MA_RECORDS": "postgres"}
    refused = cli.fails("analyze", "NVDA", "--user", "ann", extra_env=env)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "set MA_MASTER_KEY" in refused.stderr and "every host" in refused.stderr
    assert cli.ok("threads", "--json").json() == []
    assert not (cli.data_dir / "master.key").exists()
