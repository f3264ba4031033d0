"""Recording the syncs a test's code makes: which calls, on which files."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import TYPE_CHECKING

from stores import local

if TYPE_CHECKING:
    from collections.abc import Iterator


def _where(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


@contextmanager
def syncs() -> Iterator[list[tuple[str, str]]]:
    """Every fsync / fdatasync made meanwhile, and every rename: (call, path).

    Syncs the local store would hand to the kernel (native AIO: appends while the
    machine is busy) are made with ``os.fdatasync`` meanwhile, so that they are
    seen: the counts failed on a loaded machine without it.
    """
    calls: list[tuple[str, str]] = []
    real_kernel_syncs = getattr(local, "kernel_syncs_here")  # noqa: B009
    real_fsync, real_fdatasync, real_rename = os.fsync, os.fdatasync, os.rename

    def fsync(fd: int) -> None:
        calls.append(("fsync", _where(fd)))
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        calls.append(("fdatasync", _where(fd)))
        real_fdatasync(fd)

    def rename(src: str, dst: str, *args: object, **kwargs: object) -> None:
        calls.append(("rename", os.fspath(dst)))
        real_rename(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    os.fsync, os.fdatasync, os.rename = fsync, fdatasync, rename  # type: ignore[assignment]
    setattr(local, "kernel_syncs_here", lambda: None)  # noqa: B010
    try:
        yield calls
    finally:
        os.fsync, os.fdatasync, os.rename = real_fsync, real_fdatasync, real_rename
        setattr(local, "kernel_syncs_here", real_kernel_syncs)  # noqa: B010
