"""Every environment error is one clean line with exit 2; stored text never reaches a terminal raw;
what the stores create is owner-only; and running as root leaves the user's directories as they were."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.cli import Cli, clean_environ, market_analyst_command
from tests.support.services import discard_embedded_postgres


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("")
    return path


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (("analyze", "NVDA"), {"SOURCE_DATE_EPOCH": "99999999999999999"}, "SOURCE_DATE_EPOCH"),
        (("threads",), {"MA_LEASE_TTL_SECONDS": "nan"}, "MA_LEASE_TTL_SECONDS"),
        (("threads",), {"MA_LEASE_TTL_SECONDS": "inf"}, "MA_LEASE_TTL_SECONDS"),
        (("threads",), {"MA_LEASE_TTL_SECONDS": "0.001"}, "greater than or equal to 1"),
        (("profile", "show"), {"QDRANT_URL": "not a url"}, "QDRANT_URL"),
        (("analyze", "NVDA"), {"POSTGRES_URL": "not a url"}, "POSTGRES_URL is not a PostgreSQL URL"),
        (("analyze", "NVDA"), {"MA_DURABILITY": "sometimes"}, "MA_DURABILITY"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(
    cli: Cli, args: tuple[str, ...], env: dict[str, str], needle: str
):
    result = cli.fails(*args, extra_env=env)
    assert result.returncode == 2 and needle in result.stderr


def test_spaces_around_a_setting_do_not_count():
    """`MA_DATA_DIR= /x ` is /x, a key of spaces is no key (the built-in analyst), `MA_USER= bob` is bob."""
    from market_analyst.settings import Settings

    settings = Settings.load(
        environ={
            "MA_DATA_DIR": " /tmp/x ",
            "OPENAI_API_KEY": "  ",
            "MA_USER": " bob",
            "MA_APPROVERS": " a , b",
        },
        dotenv=None,
    )
    assert settings.data_dir == Path("/tmp/x") and settings.openai_api_key is None
    assert settings.user == "bob" and settings.approvers == {"a", "b"}


@pytest.mark.parametrize("where", ["is", "under"])
@pytest.mark.parametrize("args", [("analyze", "NVDA"), ("profile", "set", "--horizon", "long")])
def test_a_data_directory_that_is_a_file_is_one_line(
    cli: Cli, tmp_path: Path, where: str, args: tuple[str, ...]
):
    data_dir = _file(tmp_path) if where == "is" else _file(tmp_path) / "data"
    env = {"MA_DATA_DIR": str(data_dir)} | ({"POSTGRES_URL": ""} if args[0] == "analyze" else {})
    result = cli.fails(*args, extra_env=env)
    assert result.returncode == 2 and str(_file(tmp_path)) in result.stderr


def test_profile_set_in_a_data_directory_it_cannot_write_is_one_line(cli: Cli, tmp_path: Path):
    data_dir = tmp_path / "locked"
    data_dir.mkdir()
    subprocess.run(["chattr", "+i", str(data_dir)], check=True) if os.geteuid() == 0 else data_dir.chmod(
        0o500
    )
    try:
        result = cli.fails("profile", "set", "--horizon", "long", extra_env={"MA_DATA_DIR": str(data_dir)})
        assert result.returncode == 2 and str(data_dir) in result.stderr
    finally:
        subprocess.run(["chattr", "-i", str(data_dir)], check=True) if os.geteuid() == 0 else data_dir.chmod(
            0o700
        )


def test_a_csv_of_random_bytes_is_one_line(cli: Cli, tmp_path: Path):
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "ACME.csv").write_bytes(os.urandom(4000))
    result = cli.fails("analyze", "ACME", "--data", "csv", extra_env={"MA_CSV_DIR": str(tmp_path / "csv")})
    assert result.returncode == 2 and "ACME.csv" in result.stderr


def test_a_library_warning_adds_no_line(cli: Cli):
    # qdrant-client warns about an API key sent over http; the one line is the error itself.
    env = {"QDRANT_URL": "http://127.0.0.1:9", "QDRANT_API_KEY": "abcdefgh"}
    result = cli.fails("profile", "show", "--user", "ann", extra_env=env)
    assert "insecure" not in result.stderr.lower()


ESCAPE = "\x1b[2J\x1b]0;owned\x07"


def test_text_with_terminal_escapes_is_stored_but_never_printed_raw(cli: Cli):
    question = f"Buy?{ESCAPE} really"
    analyzed = cli.ok("analyze", "NVDA", "--question", question, "--json")
    assert analyzed.json()["draft"]["question"] == question  # stored as given, and valid JSON
    assert "\x1b" not in analyzed.stdout  # JSON escapes it
    thread = analyzed.json()["thread_id"]
    outputs = [cli.ok("status", thread).stdout]
    cli.ok("approve", thread, "--note", f"ok{ESCAPE}")
    key = cli.ok("status", thread, "--json").json()["publication"]["key"]
    outputs += [cli.ok("status", thread).stdout, cli.ok("reports", "show", key).stdout]
    refused = cli.run("reject", thread, "--reason", f"late{ESCAPE}")
    outputs.append(refused.stdout + refused.stderr)
    for output in outputs:
        assert "\x1b" not in output and "\x07" not in output
    assert "\\x1b\\[2J" in outputs[2]  # shown, escaped, in the report (its "[" escaped as Markdown)
    document = json.loads((cli.data_dir / "reports" / f"{key}.json").read_text())
    assert document["report"]["question"] == question


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_new_files_are_owner_only_under_umask_022(cli: Cli, tmp_path: Path):
    env = cli.env | {"MA_DATA_DIR": str(tmp_path / "fresh" / "data")}

    def run(*args: str) -> None:
        proc = subprocess.run(
            [*market_analyst_command(), *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            preexec_fn=lambda: os.umask(0o022),
        )
        assert proc.returncode == 0, proc.stderr

    run("profile", "set", "--user", "ann", "--horizon", "long")
    thread = json.loads(
        subprocess.run(
            [*market_analyst_command(), "analyze", "NVDA", "--json"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            preexec_fn=lambda: os.umask(0o022),
        ).stdout
    )["thread_id"]
    run("approve", thread)
    run("reports", "list")
    data_dir = tmp_path / "fresh" / "data"
    for directory in (tmp_path / "fresh", data_dir, data_dir / "reports", data_dir / "profiles"):
        assert _mode(directory) == 0o700, directory
    created = [p for p in (data_dir / "reports").iterdir()] + [p for p in (data_dir / "profiles").rglob("*")]
    assert created
    for path in created:
        assert _mode(path) in (0o600, 0o700), (path, oct(_mode(path)))


def test_the_first_command_leaves_a_0700_ancestor_as_it_was():
    """As root the embedded server runs as another user; its files go where that user can reach them
    instead of opening the user's directories to others."""
    base = Path(tempfile.mkdtemp(prefix="ma-test-root-"))  # created 0700 by mkdtemp
    data_dir = base / "nested" / "data"
    env = clean_environ() | {"MA_DATA_DIR": str(data_dir)}
    try:
        assert _mode(base) == 0o700
        proc = subprocess.run(
            [*market_analyst_command(), "analyze", "NVDA"], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert _mode(base) == 0o700 and _mode(base / "nested") == 0o700 and _mode(data_dir) == 0o700
        if os.geteuid() == 0:
            assert (data_dir / "postgres").is_symlink()  # the server's files live where its user can reach
    finally:
        discard_embedded_postgres(data_dir / "postgres")
        shutil.rmtree(base, ignore_errors=True)
