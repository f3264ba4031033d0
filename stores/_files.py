"""Durable file primitives shared by the local object store and the JSON state store.

Each function does blocking I/O: call it from a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid

from journal.errors import StorageError
from stores._nowait import WouldBlock, active

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "ensure_dirs",
    "flock_within",
    "fsync_dir",
    "lock_holders",
    "rename_into_place",
    "write_temp",
]

DEFAULT_LOCK_TIMEOUT = 10.0
"""Seconds a local store waits for a file lock before giving up (see below)."""
_FIRST_POLL, _LAST_POLL = 0.001, 0.05  # seconds between tries, doubling


def flock_within(
    fd: int, path: str, *, shared: bool = False, timeout: float = DEFAULT_LOCK_TIMEOUT
) -> None:
    """Take the ``flock`` of ``fd`` (the file ``path``), waiting ``timeout`` at most.

    A process holding the lock forever (stopped by SIGSTOP, hung in a system call)
    would block a blocking ``flock`` forever: the lock is tried without blocking
    and retried after short, growing sleeps until the deadline.

    Raises:
        StorageError: The lock was still held at the deadline (``transient``: the
            holder may let go); the message names the file and the holder's pid
            when ``/proc/locks`` shows it.
        WouldBlock: In no-wait mode (``stores._nowait``), the lock is held: it is
            tried once, never waited for.
    """
    op = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    if active():
        try:
            fcntl.flock(fd, op)
        except BlockingIOError:
            raise WouldBlock(f"{path} is locked") from None
        return
    deadline = time.monotonic() + timeout
    delay = _FIRST_POLL
    while True:
        try:
            fcntl.flock(fd, op)
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(delay, left))
            delay = min(delay * 2, _LAST_POLL)
        else:
            return
    holders = lock_holders(fd)
    who = (
        "pid " + ", ".join(map(str, holders))
        if holders
        else "another process (pid unknown)"
    )
    raise StorageError(
        f"{path} is locked by {who}: still held after {timeout:g} s (a writer "
        "paused or hung inside a write holds it); retry later, or end that process",
        transient=True,
    )


def lock_holders(fd: int) -> list[int]:
    """The pids holding a ``flock`` on the file open as ``fd`` (Linux ``/proc/locks``).

    Empty when unknown: no ``/proc/locks``, or a holder in another pid namespace
    (shown there as pid 0 or not at all).
    """
    st = os.fstat(fd)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    pids: list[int] = []
    for line in lines:
        parts = line.split()
        # "1: FLOCK ADVISORY WRITE <pid> <maj:min:ino> 0 EOF"; waiters have a "->".
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[5] != where:
            continue
        with contextlib.suppress(ValueError):
            pid = int(parts[4])
            if pid > 0 and pid not in pids:
                pids.append(pid)
    return pids


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Fsync a directory, making the entries created or removed in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dirs(
    directory: str,
    *,
    fsync: bool,
    mode: int = 0o777,
    root: str | None = None,
    durable: set[str] | None = None,
) -> None:
    """Create ``directory`` and its missing parents, syncing each new entry's parent.

    A new directory entry is durable only once its parent directory is synced.
    With ``root`` and ``durable`` (a set the caller keeps), the directories found
    between ``root`` and ``directory`` have their entries synced too, each once
    (``durable`` remembers them): another thread or process may have made one a
    moment ago and not synced its parent yet, and what is written under it must
    not be taken as durable before it is.
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
    if root is None or durable is None:
        return
    durable.update(missing)
    if not fsync:
        return
    below = root.rstrip("/") + "/"
    found = probe
    while found.startswith(below) and found not in durable:
        fsync_dir(os.path.dirname(found))
        durable.add(found)
        found = os.path.dirname(found)


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
