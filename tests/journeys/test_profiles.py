"""Profiles through the real CLI, in real processes, on a real Qdrant Edge store and a real PostgreSQL:
memory across threads, a profile that changes the analysis, invalid values and unreadable profiles
refused, and `analyze` that reads a profile without loading `qdrant_client`."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.support.cli import Cli
from tests.support.profiles import hold_store, plant

RANK = {"sell": 0, "hold": 1, "buy": 2}


def _analyze(cli: Cli, user: str) -> dict[str, Any]:
    data = cli.ok("analyze", "NVDA", "--user", user, "--json").json()
    assert isinstance(data, dict)
    return data


def _statement(data: dict[str, Any]) -> str:
    """The sentence the draft says about the profile it used."""
    return str(data["draft"]["profile"]["statement"])


def test_a_profile_is_remembered_across_threads_replaced_and_forgotten(cli: Cli):
    # No profile yet: the draft says so and how to set one.
    none = _analyze(cli, "ann")
    assert none["draft"]["profile"]["source"] == "default"
    assert "No stored profile for user 'ann'" in _statement(none)
    assert "market-analyst profile set --user ann" in none["draft"]["markdown"]

    cli.ok(
        "profile",
        "set",
        "--user",
        "ann",
        "--risk-tolerance",
        "conservative",
        "--horizon",
        "long",
        "--sectors",
        "semiconductors, software",
    )
    first = _analyze(cli, "ann")
    used = first["draft"]["profile"]
    assert used["source"] == "stored"
    assert used["profile"]["risk_tolerance"] == "conservative" and used["profile"]["horizon"] == "long"
    assert "Profile of user 'ann'" in _statement(first) and "conservative risk tolerance" in _statement(first)
    assert "semiconductors, software" in first["draft"]["markdown"]

    # Change one field: the rest is kept, and a new thread uses the replacement.
    cli.ok("profile", "set", "--user", "ann", "--risk-tolerance", "aggressive")
    shown = cli.ok("profile", "show", "--user", "ann", "--json").json()
    assert shown["profile"]["risk_tolerance"] == "aggressive" and shown["profile"]["horizon"] == "long"
    second = _analyze(cli, "ann")
    assert second["thread_id"] != first["thread_id"]
    assert second["draft"]["profile"]["profile"]["risk_tolerance"] == "aggressive"
    assert "aggressive risk tolerance, long horizon" in _statement(second)

    # The first thread keeps the copy it analysed with: the state, not the store, is its record.
    earlier = cli.ok("status", first["thread_id"], "--json").json()
    assert earlier["draft"]["profile"]["profile"]["risk_tolerance"] == "conservative"

    # Another user is untouched by ann's profile.
    assert _analyze(cli, "bob")["draft"]["profile"]["source"] == "default"

    assert "Deleted" in cli.ok("profile", "delete", "--user", "ann").stdout
    third = _analyze(cli, "ann")
    assert third["draft"]["profile"]["source"] == "default"
    assert "No stored profile for user 'ann'" in _statement(third)
    assert "No stored profile" in cli.ok("profile", "show", "--user", "ann").stdout
    again = cli.ok("profile", "delete", "--user", "ann", "--json").json()
    assert again == {"user_id": "ann", "deleted": False}


def test_conservative_and_aggressive_read_the_same_data_differently(cli: Cli):
    cli.ok("profile", "set", "--user", "cautious", "--risk-tolerance", "conservative")
    cli.ok("profile", "set", "--user", "bold", "--risk-tolerance", "aggressive")
    careful, bold = _analyze(cli, "cautious")["draft"], _analyze(cli, "bold")["draft"]

    # Same ticker, same data.
    assert careful["figures"] == bold["figures"] and careful["as_of"] == bold["as_of"]
    # The aggressive reading is the more positive one: a better recommendation, or the same one held
    # with more confidence. With the bundled NVDA snapshot the rules give sell against buy.
    bold_view = (RANK[bold["recommendation"]], bold["confidence"])
    assert bold_view > (RANK[careful["recommendation"]], careful["confidence"])
    assert (careful["recommendation"], bold["recommendation"]) == ("sell", "buy")
    # The framing and risk factors say which limits applied, and each draft names its profile.
    assert "for a conservative investor" in careful["framing"]
    assert "aggressive investor" in bold["framing"]
    assert any("a conservative profile accepts" in r for r in careful["risk_factors"])
    assert "Profile of user 'cautious'" in careful["markdown"]
    assert "conservative risk tolerance" in careful["markdown"]
    assert "Profile of user 'bold'" in bold["markdown"]
    assert "aggressive risk tolerance" in bold["markdown"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--risk-tolerance", "yolo"), "'--risk-tolerance': 'yolo' is not one of"),
        (("--horizon", "forever"), "'--horizon': 'forever' is not one of"),
        (("--notes", "x" * 501), "at most 500 characters"),
        (("--sectors", "ok,_bad"), "sector '_bad'"),
    ],
)
def test_invalid_values_exit_non_zero_with_one_line_and_change_nothing(
    cli: Cli, args: tuple[str, ...], needle: str
):
    cli.ok("profile", "set", "--user", "ann", "--risk-tolerance", "moderate", "--notes", "keep me")
    before = cli.ok("profile", "show", "--user", "ann", "--json").json()
    result = cli.fails("profile", "set", "--user", "ann", *args)
    assert result.returncode == 2 and needle in result.stderr
    assert cli.ok("profile", "show", "--user", "ann", "--json").json() == before


@pytest.mark.parametrize("user", ["", "a" * 500, "a" * 65, "ann smith", "../ann"])
def test_invalid_user_ids_exit_non_zero_with_one_line(cli: Cli, user: str):
    cli.ok("profile", "set", "--user", "ann", "--risk-tolerance", "aggressive")
    before = cli.ok("profile", "show", "--user", "ann", "--json").json()
    for command in ("set", "show", "delete"):
        extra = ("--horizon", "long") if command == "set" else ()
        result = cli.fails("profile", command, "--user", user, *extra)
        assert result.returncode == 2 and "invalid user ID" in result.stderr
    assert cli.ok("profile", "show", "--user", "ann", "--json").json() == before


def test_a_store_held_by_another_process_is_one_line_after_a_wait(cli: Cli):
    cli.ok("profile", "set", "--user", "ann", "--horizon", "short")
    holder = hold_store(cli.harness, "edge", cli.data_dir / "profiles", 60)
    try:
        result = cli.fails("profile", "show", "--user", "ann")
        assert result.returncode == 2
        assert "in use by another process" in result.stderr
        assert str(cli.data_dir / "profiles") in result.stderr
    finally:
        holder.kill()
        holder.wait()
    assert "short horizon" in cli.ok("profile", "show", "--user", "ann").stdout


def test_an_unreadable_stored_profile_is_one_line_and_delete_clears_it(cli: Cli):
    cli.ok("profile", "set", "--user", "ann", "--horizon", "short")
    plant("edge", cli.data_dir / "profiles", "ann", {"user_id": "ann", "horizon": "someday"})
    for args in (("profile", "show", "--user", "ann"), ("analyze", "NVDA", "--user", "ann")):
        result = cli.fails(*args)
        assert result.returncode == 2
        assert "the stored profile of user 'ann' is unreadable (invalid profile horizon" in result.stderr
        assert "market-analyst profile delete --user ann" in result.stderr
    cli.ok("profile", "delete", "--user", "ann")
    assert "No stored profile" in cli.ok("profile", "show", "--user", "ann").stdout


def test_a_server_api_key_over_plain_http_adds_no_warning_to_the_error_line(cli: Cli):
    server = {"QDRANT_URL": "http://127.0.0.1:9", "QDRANT_API_KEY": "not-a-real-key"}
    result = cli.fails("profile", "show", "--user", "ann", extra_env=server)  # exactly one line on stderr
    # A server that does not answer is a service that is unavailable (69), said in one line.
    assert (
        result.returncode == 69 and "the Qdrant server at http://127.0.0.1:9 did not answer" in result.stderr
    )
    assert "not-a-real-key" not in result.stderr


def test_analyze_reads_the_profile_without_importing_qdrant_client(cli: Cli):
    cli.ok("profile", "set", "--user", "ann", "--risk-tolerance", "aggressive")
    # A fresh interpreter (not the suite's pre-imported fork server), timing every import it makes.
    result = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "market_analyst",
            "analyze",
            "NVDA",
            "--user",
            "ann",
            "--json",
        ],
        cwd=cli.cwd,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"risk_tolerance": "aggressive"' in result.stdout  # it read the stored profile
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "qdrant_edge" in imported
    assert not {name for name in imported if name.split(".")[0] == "qdrant_client"}


def test_profile_commands_have_help(cli: Cli):
    for command in ("set", "show", "delete"):
        assert "--user" in cli.ok("profile", command, "--help").stdout
    assert "local-mode folder" in cli.ok("profile", "migrate", "--help").stdout
