"""Approvers of the web inbox: tokens shown once, only argon2 hashes kept in a 0600 file, removal
that ends a token at once, and the session secret made once."""

from __future__ import annotations

import json
import time
from pathlib import Path

from market_analyst.settings import Settings
from market_analyst.workflow.approvers import add_approver, approver_store, remove_approver
from tests.support.cli import Cli


def test_approvers_file_is_private_and_keeps_only_a_hash(cli: Cli):
    token = cli.ok("approvers", "add", "ivy").stdout.strip()
    assert cli.ok("approvers", "add", "jon").stdout.strip() != token
    path = cli.data_dir / "approvers.json"
    assert path.stat().st_mode & 0o777 == 0o600
    stored = path.read_text()
    assert token not in stored and token.split(".", 1)[1] not in stored and "$argon2id$" in stored
    assert "exists" in cli.fails("approvers", "add", "ivy").stderr
    assert "invalid user ID" in cli.fails("approvers", "add", "no spaces").stderr
    listed = cli.ok("approvers", "list", "--json").json()
    assert [a["name"] for a in listed] == ["ivy", "jon"] and "token" not in json.dumps(listed)
    cli.ok("approvers", "remove", "ivy")
    assert "no approver named" in cli.fails("approvers", "remove", "ivy").stderr
    assert [a["name"] for a in cli.ok("approvers", "list", "--json").json()] == ["jon"]


def test_a_token_signs_in_only_its_approver_until_removed(tmp_path: Path):
    settings = Settings.load(environ={"MA_DATA_DIR": str(tmp_path)}, dotenv=None)
    token = add_approver(settings, "kim")
    other = add_approver(settings, "lee")
    store = approver_store(settings)
    assert store.authenticate(token).name == "kim" and store.authenticate(other).name == "lee"
    token_id, secret = token.split(".", 1)
    for wrong in (
        f"{token_id}.{secret[:-1]}x",
        f"{token_id}.",
        secret,
        "",
        "....",
        other.split(".")[0] + "." + secret,
    ):
        assert store.authenticate(wrong) is None, wrong
    started = time.perf_counter()
    assert store.authenticate(token).name == "kim"  # verified before: found by its digest
    assert time.perf_counter() - started < 0.02
    remove_approver(settings, "kim")
    assert store.authenticate(token) is None  # the file changed: no remembered verification survives
    assert store.current("kim", token_id) is None and store.current("lee", other.split(".")[0]).name == "lee"


def test_the_session_secret_is_made_once_and_private(tmp_path: Path):
    settings = Settings.load(environ={"MA_DATA_DIR": str(tmp_path / "data")}, dotenv=None)
    secret = approver_store(settings).session_secret()
    assert len(secret) == 64 and approver_store(settings).session_secret() == secret
    assert (tmp_path / "data" / "session-secret").stat().st_mode & 0o777 == 0o600
