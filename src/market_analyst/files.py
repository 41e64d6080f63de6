"""Owner-only files and directories: what the stores create is readable by its owner alone (0700
directories, 0600 files) whatever the umask, and a path that cannot be used is one clear line."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from market_analyst.errors import UserError

DIR_MODE = 0o700
FILE_MODE = 0o600


def _blocking_file(path: Path) -> Path | None:
    """The nearest ancestor (or `path` itself) that exists and is not a directory."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return None if candidate.is_dir() else candidate
    return None


def refuse_under_file(path: Path, what: str) -> None:
    """`UserError` when `path` is, or lies under, something that is not a directory: a store there
    cannot exist, which is an error to report, not an empty store to describe."""
    blocker = _blocking_file(path)
    if blocker is not None:
        where = "is a file" if blocker == path else f"lies under a file ({blocker})"
        raise UserError(f"{what} {path} {where}, not a directory: point it at a directory")


def private_dir(path: Path, what: str) -> Path:
    """Make sure `path` is a directory, creating it and any missing parents owner-only (0700).

    A directory that already exists keeps its mode: the user chose it. `what` names the setting or
    store in the error (e.g. "MA_DATA_DIR", "the archive")."""
    if path.is_dir():
        return path
    refuse_under_file(path, what)
    missing = [p for p in (path, *path.parents) if not p.exists()][::-1]
    for directory in missing:
        try:
            directory.mkdir(mode=DIR_MODE)
            os.chmod(directory, DIR_MODE)  # mkdir's mode passes through the umask; this does not
        except FileExistsError:
            continue  # another process created it meanwhile
        except OSError as exc:
            raise UserError(f"cannot create {what} {path}: {exc.strerror or exc}") from None
    if not path.is_dir():
        raise UserError(f"{what} {path} is not a directory")
    return path


def private_file(path: Path) -> None:
    """Make an existing file owner-only (0600); a file that vanished meanwhile is left alone."""
    try:
        os.chmod(path, FILE_MODE)
    except FileNotFoundError:
        pass


def private_tree(root: Path) -> None:
    """Make everything below `root` owner-only: what a library created with its own modes.

    A file or folder removed while the walk passes (a library's temporary file, renamed into place)
    is skipped rather than ending the command: `os.walk` ignores a folder it can no longer list."""
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    continue
                mode = DIR_MODE if stat.S_ISDIR(info.st_mode) else FILE_MODE
                if stat.S_IMODE(info.st_mode) != mode:
                    os.chmod(path, mode)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd`: a write may take less than it was given (a disk filling
    up), and the next one then says why (`OSError`, ENOSPC)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_new_private(path: Path, data: bytes) -> None:
    """Create `path` (it must not exist: `FileExistsError`) holding `data`, on disk (fsynced) and
    owner-only (0600) whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_whole(path: Path, data: bytes) -> None:
    """`path` replaced by an owner-only file holding all of `data` (written beside it, fsynced,
    renamed, the folder synced); on `OSError` (a full disk) it is left as it was, with no
    temporary file behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        write_new_private(tmp, data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


_BLOCK = 1 << 16
_ZEROS = bytes(_BLOCK)


def copy_sparse(source: str | Path, target: str | Path) -> None:
    """Copy the file `source` to `target` (owner-only), writing only the parts that hold data: the
    holes of a sparse file (an engine's preallocated log) stay holes, and so do blocks of zeros, so
    the copy takes on disk at most what the original does, not its apparent size. Not synced: what
    copies a store for safekeeping checks the copy before it uses it."""
    with open(source, "rb") as read, open(target, "wb") as write:
        os.fchmod(write.fileno(), FILE_MODE)
        size = os.fstat(read.fileno()).st_size
        at = 0
        while at < size:
            try:
                start = os.lseek(read.fileno(), at, os.SEEK_DATA)
            except OSError:  # ENXIO: nothing but a hole up to the end
                break
            end = os.lseek(read.fileno(), start, os.SEEK_HOLE)
            read.seek(start)
            write.seek(start)
            left = end - start
            while left > 0:
                chunk = read.read(min(left, _BLOCK))
                if not chunk:
                    break
                if chunk == _ZEROS[: len(chunk)]:
                    write.seek(len(chunk), os.SEEK_CUR)  # zeros an engine preallocated: a hole here
                else:
                    write.write(chunk)
                left -= len(chunk)
            at = end
        write.truncate(size)


def copy_sparse_tree(source: Path, target: Path) -> None:
    """Copy the folder `source` to the new folder `target` (owner-only) with `copy_sparse`."""
    import shutil

    shutil.copytree(source, target, copy_function=copy_sparse)
    private_tree(target)
    os.chmod(target, DIR_MODE)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in directory `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive_lock(path: Path, refusal: Callable[[OSError], Exception] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created owner-only) for the block, waiting while another
    process holds it; the kernel releases it if the process dies. A lock file that cannot be made
    raises `refusal(error)` when given (a line naming the store), else the `OSError` itself."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    except OSError as exc:
        if refusal is None:
            raise
        raise refusal(exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
