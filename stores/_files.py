"""Durable file primitives shared by the local object store and the JSON state store.

Each function does blocking I/O: call it from a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import uuid

__all__ = ["ensure_dirs", "fsync_dir", "rename_into_place", "write_temp"]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Fsync a directory, making the entries created or removed in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dirs(directory: str, *, fsync: bool, mode: int = 0o777) -> None:
    """Create ``directory`` and its missing parents, syncing each new entry's parent.

    A new directory entry is durable only once its parent directory is synced.
    """
    missing: list[str] = []
    probe = directory
    while not os.path.isdir(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, mode)
        if fsync:
            fsync_dir(os.path.dirname(path))


def write_temp(
    directory: str,
    data: bytes,
    *,
    fsync: bool,
    prefix: str = ".tmp-",
    mode: int = 0o644,
) -> str:
    """Write ``data`` to a new hidden temporary file in ``directory``; return its path.

    The file is fsynced when ``fsync`` is true, so that linking or renaming it into
    place publishes complete bytes. On failure the temporary file is removed.
    """
    tmp = os.path.join(directory, f"{prefix}{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def rename_into_place(tmp: str, path: str | os.PathLike[str]) -> None:
    """Rename the temporary file ``tmp`` over ``path``; remove it if that fails.

    The rename is atomic: readers see the old file or the new one, never a mix.
    """
    try:
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
