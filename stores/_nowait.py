"""Serving a local read on the event loop when it cannot block.

A read of the local store costs a worker-thread hop each way (``stores._offload``):
on a busy two-core machine 100-300 µs, against 5-50 µs for the ``pread`` of bytes
already in the page cache. Loading a small thread takes four such reads, one after
the other, so the hops were most of its time. The store therefore tries a read on
the event loop first, in *no-wait* mode, and hands it to a worker thread only when
it would have to wait:

- bytes are read with ``preadv2(RWF_NOWAIT)``, which returns ``EAGAIN`` rather than
  wait for the disk when they are not all in the page cache;
- a lock is only tried: a segment's thread lock held by a writer of this process,
  or its ``flock`` held by a writer of another, means waiting.

Either raises :class:`WouldBlock` out of the attempt, which the store catches to run
the same read in a worker thread. An attempt changes nothing a repeat does not redo
(indexing a segment is idempotent), so a read abandoned halfway is simply done again.
Metadata calls (``open``, ``stat``, directory listings) are taken to be cached, as
the kernel's dentry and inode caches hold them for any file read recently; a store
on a file system where they are slow (a network mount) can turn the attempt off.

The store also tries its single writes on the loop in this mode (``LocalStore``'s
``inline_writes``), and the writes of concurrent appends, whose syncs then run in a
worker: there the locks matter, and the segment code raises :class:`WouldBlock`
only before it writes anything.

The mode is per thread: worker threads never enter it, so everything they run
blocks as it always did.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "WouldBlock",
    "acquire",
    "active",
    "attempt",
    "held",
    "pread",
    "pread_buffer",
    "read_whole",
]

_RWF_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)
_state = threading.local()


class WouldBlock(Exception):
    """A no-wait read would have to wait (see the module docstring).

    Attributes:
        unsupported: The file system cannot answer without waiting at all
            (``RWF_NOWAIT`` unknown to it): there is no point trying again.
    """

    def __init__(self, why: str, *, unsupported: bool = False) -> None:
        super().__init__(why)
        self.unsupported = unsupported


def active() -> bool:
    """Whether this thread is inside an :func:`attempt`."""
    return getattr(_state, "on", False)


class _Attempt:
    # A class rather than a generator: the event loop enters one per append and
    # per inline read, and a generator's context manager costs several calls more.
    __slots__ = ()

    def __enter__(self) -> None:
        if _RWF_NOWAIT is None:
            raise WouldBlock("preadv2(RWF_NOWAIT) is not available", unsupported=True)
        _state.on = True

    def __exit__(self, *_: object) -> None:
        _state.on = False


_ATTEMPT = _Attempt()


def attempt() -> contextlib.AbstractContextManager[None]:
    """Run the block in no-wait mode (raises :class:`WouldBlock` out of it)."""
    return _ATTEMPT


def pread(fd: int, length: int, offset: int) -> bytes:
    """``os.pread``; in no-wait mode only if every byte is in the page cache.

    Raises:
        WouldBlock: In no-wait mode, when not all ``length`` bytes could be read
            without waiting (also at the end of the file: the worker thread's
            plain read then tells a short file from an uncached one).
    """
    if not getattr(_state, "on", False):
        return os.pread(fd, length, offset)
    return bytes(_nowait_read(fd, length, offset))


def pread_buffer(fd: int, length: int, offset: int) -> bytes | bytearray:
    """:func:`pread` for bytes only parsed, never kept: no copy in no-wait mode.

    Raises:
        WouldBlock: As :func:`pread` does.
    """
    if not getattr(_state, "on", False):
        return os.pread(fd, length, offset)
    return _nowait_read(fd, length, offset)


def _nowait_read(fd: int, length: int, offset: int) -> bytearray:
    if length <= 0:
        return bytearray()
    buf = bytearray(length)
    try:
        got = os.preadv(fd, [buf], offset, _RWF_NOWAIT)  # type: ignore[arg-type]
    except BlockingIOError:
        raise WouldBlock("bytes not in the page cache") from None
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise WouldBlock(str(exc), unsupported=True) from None
        raise
    if got != length:
        raise WouldBlock("short read")
    return buf


def read_whole(path: str) -> bytes:
    """The whole content of the file at ``path`` (see :func:`pread`).

    Raises:
        FileNotFoundError: No file at ``path`` (and the other errors of ``open``).
        WouldBlock: In no-wait mode, when its bytes are not all cached.
    """
    if not getattr(_state, "on", False):
        with open(path, "rb") as fh:
            return fh.read()
    fd = os.open(path, os.O_RDONLY)
    try:
        # Plain files are replaced whole, or overwritten in place at their own
        # size, never grown in place: the size of the inode opened is the size
        # of its content.
        return pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)


def acquire(lock: threading.Lock) -> None:
    """Take ``lock``; in no-wait mode only if it is free now.

    Raises:
        WouldBlock: In no-wait mode, when another thread holds it.
    """
    if not getattr(_state, "on", False):
        lock.acquire()
    elif not lock.acquire(blocking=False):
        raise WouldBlock("lock held by another thread")


@contextlib.contextmanager
def held(lock: threading.Lock) -> Iterator[None]:
    """Hold ``lock`` (taken by :func:`acquire`) for the block.

    Raises:
        WouldBlock: In no-wait mode, when another thread holds it.
    """
    acquire(lock)
    try:
        yield
    finally:
        lock.release()
