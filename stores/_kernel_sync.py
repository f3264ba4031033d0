"""Hand an append's ``fdatasync`` to the kernel instead of to a worker thread.

When several threads are appended to at once, the local store writes each frame on
the event loop and leaves only its ``fdatasync`` to a worker thread
(:func:`stores._offload.run_io_only`). Each such worker takes the interpreter lock
three or four times per sync (to pick the call up, around the sync, to hand the
result back), and each take makes the loop wait for the lock around its own system
calls: at 64 concurrent sessions a turn cost 14-16 context switches, and the loop
thread spent 0.26-0.31 ms of CPU on it against 0.13 for the same appends without
syncs. Linux's native AIO runs an ``fdatasync`` (``IOCB_CMD_FDSYNC``) in the
kernel's own workers and signals its end on an ``eventfd`` the loop watches: no
Python thread is involved. The syncs asked for while the loop runs its ready
callbacks are submitted together after them, in one ``io_submit``: each call wakes
a kernel worker on the submitting CPU, which took that CPU from the loop for 26 µs
a submission when each went alone. The loop reaps many ends with one
``io_getevents``. Measured with 64 sessions appending 100 turns each on ext4:
1.67-2.10x the turns per second of the threads, under one context switch a turn
(``README.md`` has the benchmark's figures).

Each event loop gets its own AIO context (``io_setup``) and ``eventfd``, made on
first use and freed when the loop is. A sync's *completion* (the function given to
:meth:`KernelSyncs.submit`: index the frame, let go of the segment's locks) runs in
whichever thread reaps its event, normally the loop's; its result then settles the
awaiting future. A completion must run even if nobody awaits it any more, or the
segment's locks would stay taken: when the awaiting task is cancelled, or its
coroutine is closed (a loop closed with the task pending), a daemon thread waits for
that sync's end in the kernel and runs its completion, or syncs the file itself if
the sync had not been submitted yet (:meth:`KernelSyncs.wait`).

Nothing here is required: where the kernel or a sandbox refuses the context
(``ENOSYS``, ``EPERM``, ``EAGAIN`` past ``fs.aio-max-nr``), or on an architecture
whose system call numbers are not listed here, the caller gets None and hands the
sync to a worker thread as before. A sync the kernel refuses at submission (its
ring full, a file without an AIO sync) runs in a thread of its own with the same
completion; after a file without one, the loop's syncs go back to the workers. A
forked child starts without contexts: the kernel does not carry them over.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from stores._offload import settle

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

__all__ = ["KernelSyncs", "for_running_loop", "in_flight", "submitted"]

_T = TypeVar("_T")

# io_setup, io_destroy, io_getevents, io_submit.
_NUMBERS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB = struct.Struct("=QIIHhIQQqQII")  # struct iocb: 64 bytes
_EVENT = struct.Struct("=QQqq")  # struct io_event: data, obj, res, res2
_CMD_FDSYNC = 3
_FLAG_RESFD = 1  # signal the eventfd given in the iocb
# Asked of io_setup; syncs past the ring's room wait in the queue. The kernel
# counts it against the machine-wide fs.aio-max-nr (65,536 by default), shared
# with every other user of AIO on the machine: fs.aio-nr rose by 256 a loop here.
_RING = 256
_BATCH = 128  # events taken per io_getevents
# The kernel or a sandbox will not do this at all (a context, or an AIO sync of a
# file), as opposed to not now (EAGAIN).
_REFUSED = frozenset({errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP})

_lock = threading.Lock()
_in_flight = 0
_submitted = 0
_usable: bool | None = None  # None: not tried yet
_abi: _Abi | None = None
_contexts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, KernelSyncs | None] = (
    weakref.WeakKeyDictionary()
)
_last: tuple[weakref.ref[asyncio.AbstractEventLoop], KernelSyncs | None] | None = None


def in_flight() -> int:
    """How many syncs asked of the kernel have not ended yet (queued or running)."""
    return _in_flight


def submitted() -> int:
    """How many syncs this process has handed to the kernel so far."""
    return _submitted


def _count(in_flight: int, submitted: int = 0) -> None:
    global _in_flight, _submitted
    with _lock:
        _in_flight += in_flight
        _submitted += submitted


class _Abi:
    """The system calls, through :mod:`ctypes` (imported only here)."""

    def __init__(self, numbers: tuple[int, int, int, int]) -> None:
        import ctypes

        self.ctypes = ctypes
        call = ctypes.CDLL(None, use_errno=True).syscall
        call.restype = ctypes.c_long
        self.call = call
        self.setup, self.destroy, self.getevents, self.submit = numbers

    def errno(self) -> int:
        return int(self.ctypes.get_errno())


def _load() -> _Abi | None:
    global _usable, _abi
    if _usable is None:
        numbers = _NUMBERS.get(os.uname().machine)
        _usable = False
        if sys.platform.startswith("linux") and numbers is not None:
            try:
                _abi = _Abi(numbers)
            except (ImportError, OSError, AttributeError):
                _abi = None
            _usable = _abi is not None and hasattr(os, "eventfd")
    return _abi if _usable else None


def for_running_loop() -> KernelSyncs | None:
    """The running loop's kernel syncs, or None where they cannot be had.

    Call from the loop's own thread, with the loop running.
    """
    global _last
    import asyncio  # loaded already: a loop is running

    loop = asyncio.get_running_loop()
    last = _last
    if last is not None and last[0]() is loop:
        return last[1]  # most processes run one loop: no weak-key lookup
    try:
        syncs = _contexts[loop]
    except KeyError:
        abi = _load()
        syncs = None if abi is None else KernelSyncs.open(abi, loop)
        _contexts[loop] = syncs
    _last = (weakref.ref(loop), syncs)
    return syncs


class _Op(Generic[_T]):
    """One sync for the kernel, and what to do when it ends."""

    __slots__ = ("complete", "fd", "finished", "future", "key", "queued")

    def __init__(
        self,
        future: asyncio.Future[_T],
        complete: Callable[[OSError | None], _T],
        fd: int,
        key: int,
    ) -> None:
        self.future = future
        self.complete = complete
        self.fd = fd
        self.key = key
        self.finished = False
        self.queued = True  # not handed to the kernel yet


class KernelSyncs:
    """One event loop's AIO context, its ``eventfd``, and the syncs in flight."""

    def __init__(self, abi: _Abi, loop: asyncio.AbstractEventLoop, ctx: int) -> None:
        ctypes = abi.ctypes
        self._abi = abi
        self._ctx = ctypes.c_ulong(ctx)
        # The loop holds this object (its reader callback): a strong reference
        # back would keep the registry's weak key alive.
        self._loop = weakref.ref(loop)
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._ops: dict[int, _Op[Any]] = {}  # listed until reaped or synced
        self._next = 0
        self._queue: list[_Op[Any]] = []  # for the next io_submit
        self._queue_lock = threading.Lock()
        self.refused = False  # the kernel cannot sync these files this way
        self.deferred = 0  # syncs held back for a full ring, over time
        # Taken by whichever thread reaps: the loop's reader tries it, a thread
        # waiting out an orphaned sync blocks on it.
        self._reaping = threading.Lock()
        self._iocbs = ctypes.create_string_buffer(0)
        self._pointers = (ctypes.c_void_p * 0)()
        self._events = ctypes.create_string_buffer(_EVENT.size * _BATCH)
        self._no_wait = (ctypes.c_long * 2)(0, 0)
        self._a_while = (ctypes.c_long * 2)(0, 100_000_000)  # 0.1 s
        self._long = ctypes.c_long
        self._pid = os.getpid()
        import asyncio  # loaded already: a loop is running

        self._running_loop = asyncio.events._get_running_loop
        try:
            loop.add_reader(self._efd, self._on_ready)
        except BaseException:
            os.close(self._efd)
            raise
        weakref.finalize(loop, self._close)

    @classmethod
    def open(cls, abi: _Abi, loop: asyncio.AbstractEventLoop) -> KernelSyncs | None:
        """A context for ``loop``, or None when it cannot have one.

        None when the kernel refuses the context, or the loop cannot watch an
        ``eventfd`` (a loop without ``add_reader``) or none can be made.
        """
        global _usable
        ctx = abi.ctypes.c_ulong(0)
        if abi.call(abi.setup, abi.ctypes.c_long(_RING), abi.ctypes.byref(ctx)) < 0:
            if abi.errno() in _REFUSED:
                _usable = False  # no loop of this process will get one
            return None  # EAGAIN: fs.aio-max-nr reached for now
        try:
            return cls(abi, loop, ctx.value)
        except (OSError, NotImplementedError, RuntimeError):
            abi.call(abi.destroy, ctx)
            return None

    def submit(
        self, fd: int, complete: Callable[[OSError | None], _T]
    ) -> _Op[_T] | None:
        """Have ``fd`` synced (``fdatasync``); ``complete`` runs when that ends.

        The syncs asked for while the loop runs its ready callbacks go to the
        kernel together, in one ``io_submit`` after them: each call wakes one of
        the kernel's workers, which on a busy machine takes the loop's CPU from it
        for a while. ``complete`` gets the sync's error (None when it succeeded),
        in whichever thread reaps the sync's end, and its result or exception is
        the outcome :meth:`wait` returns. Syncs the kernel has no room for (its
        ring full) wait in the queue until ends are reaped; one it refuses (a
        file without an AIO sync) runs in a thread of its own, with the same
        completion.

        Returns:
            The sync, or None when the kernel has refused to sync these files
            (nothing is queued, ``complete`` will not run): the caller syncs
            another way.
        """
        if self.refused:
            return None
        loop = self._loop()
        assert loop is not None  # noqa: S101 - called on the running loop
        self._next += 1
        op: _Op[_T] = _Op(loop.create_future(), complete, fd, self._next)
        self._ops[op.key] = op
        _count(1)
        with self._queue_lock:
            self._queue.append(op)
            if len(self._queue) == 1:
                loop.call_soon(self._flush)
        return op

    def _flush(self) -> None:
        """Hand the queued syncs to the kernel, in one call (on the loop)."""
        with self._queue_lock:
            queue, self._queue = self._queue, []
            for op in queue:
                op.queued = False
        if not queue:
            return  # each was cancelled and synced by a thread
        abi, ctypes, count = self._abi, self._abi.ctypes, len(queue)
        if len(self._pointers) < count:
            size = max(count, 2 * len(self._pointers), 64)
            self._iocbs = ctypes.create_string_buffer(_IOCB.size * size)
            base = ctypes.addressof(self._iocbs)
            self._pointers = (ctypes.c_void_p * size)(
                *(base + _IOCB.size * i for i in range(size))
            )
        iocbs, efd = self._iocbs, self._efd
        for i, op in enumerate(queue):
            _IOCB.pack_into(
                iocbs, _IOCB.size * i, op.key, 0, 0, _CMD_FDSYNC, 0, op.fd, 0, 0,
                0, 0, _FLAG_RESFD, efd,
            )  # fmt: skip
        done = 0
        pointer = ctypes.sizeof(ctypes.c_void_p)
        while done < count:
            got = abi.call(
                abi.submit,
                self._ctx,
                self._long(count - done),
                ctypes.byref(self._pointers, pointer * done),
            )
            if got <= 0:
                error = abi.errno()
                left = queue[done:]
                if error == errno.EAGAIN and len(self._ops) > len(left):
                    # The ring is full: these wait for the next ends to be
                    # reaped (see _on_ready), in order, ahead of newer ones.
                    with self._queue_lock:
                        for op in left:
                            op.queued = True
                        self._queue[:0] = left
                    self.deferred += len(left)
                    return
                if error in _REFUSED:
                    self.refused = True  # EINVAL: no AIO sync for this file
                break
            done += got
            _count(0, got)
        for op in queue[done:]:
            self._sync_in_thread(op)

    def _sync_in_thread(self, op: _Op[Any]) -> None:
        """Sync ``op`` (not in the kernel) and complete it, in a thread of its own.

        Here when no thread can be started (the process has run out of them):
        blocking the loop for one sync beats an append that never ends and holds
        its segment's locks for good.
        """
        del self._ops[op.key]
        try:
            _daemon(self._sync_here, op, "agent-journal-sync")
        except RuntimeError:
            self._sync_here(op)

    def _sync_here(self, op: _Op[Any]) -> None:
        try:
            os.fdatasync(op.fd)
        except OSError as exc:
            self._finish(op, -(exc.errno or errno.EIO))
        else:
            self._finish(op, 0)

    async def wait(self, op: _Op[_T]) -> _T:
        """The outcome of ``op``'s completion, once the kernel has synced.

        If the awaiting task is cancelled, or its coroutine closed, before the
        sync ends, a daemon thread runs the completion once the sync has ended
        (or syncs the file itself, if the sync was not handed to the kernel
        yet): the segment's locks are let go of even if the loop stops.

        Raises:
            BaseException: Whatever the completion raised.
        """
        try:
            return await op.future
        except BaseException:
            if not op.finished:
                with self._queue_lock:
                    queued = op.queued
                    if queued:
                        self._queue.remove(op)
                        op.queued = False
                if queued:
                    self._sync_in_thread(op)
                elif op.key in self._ops:  # in the kernel (else a thread has it)
                    # Without a thread, the loop's own reaping (or its close)
                    # still runs the completion.
                    with contextlib.suppress(RuntimeError):
                        _daemon(self._wait_out, op, "agent-journal-orphaned-sync")
            raise

    def _on_ready(self) -> None:
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            return
        # Else a thread is reaping: it wakes the loop again when done.
        if self._reaping.acquire(blocking=False):
            try:
                self._reap(None)
            finally:
                self._reaping.release()
        if self._queue:
            self._flush()  # syncs the ring had no room for

    def _wait_out(self, op: _Op[Any]) -> None:
        with self._reaping:
            self._reap(op)
        # Ends this thread reaped may have been signalled to the loop meanwhile,
        # and swallowed by its reader while the lock was taken.
        with contextlib.suppress(OSError):  # closed with its loop: nothing left
            os.eventfd_write(self._efd, 1)

    def _reap(self, until: _Op[Any] | None) -> None:
        """Run the completions of the syncs that ended (the caller reaps).

        With ``until``, wait in the kernel until that sync has ended.
        """
        abi, events, long = self._abi, self._events, self._long
        # Waiting for ``until``, a bounded wait: it is checked again now and then,
        # should its end be reaped by another thread.
        least, timeout = (0, self._no_wait) if until is None else (1, self._a_while)
        while until is None or not until.finished:
            got = abi.call(
                abi.getevents, self._ctx, long(least), long(_BATCH), events, timeout
            )
            if got < 0:
                if abi.errno() == errno.EINTR:
                    continue
                raise OSError(abi.errno(), "io_getevents")
            for i in range(got):
                key, _, res, _ = _EVENT.unpack_from(events, i * _EVENT.size)
                self._finish(self._ops.pop(key), res)
            if until is None and got < _BATCH:
                return

    def _finish(self, op: _Op[Any], res: int) -> None:
        _count(-1)
        error = None if res >= 0 else OSError(-res, os.strerror(-res))
        try:
            outcome: tuple[bool, Any] = (True, op.complete(error))
        except BaseException as exc:  # handed to the awaiting task
            outcome = (False, exc)
        op.finished = True
        future = op.future
        if self._running_loop() is self._loop():
            settle(future, *outcome)
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it
            future.get_loop().call_soon_threadsafe(settle, future, *outcome)

    def _close(self) -> None:
        # The loop is gone: run what is still to sync or in flight, then free the
        # context.
        if self._pid != os.getpid():
            return  # a forked child's copy: the context and the eventfd are not its
        with self._queue_lock:
            queue, self._queue = self._queue, []
        for op in queue:  # never handed to the kernel
            del self._ops[op.key]
            self._sync_here(op)
        if self._ops:
            with self._reaping:
                for op in list(self._ops.values()):
                    self._reap(op)
        self._abi.call(self._abi.destroy, self._ctx)
        os.close(self._efd)


def _daemon(run: Callable[[_Op[Any]], None], op: _Op[Any], name: str) -> None:
    threading.Thread(target=run, args=(op,), name=name, daemon=True).start()


def _after_fork() -> None:
    global _contexts, _last, _lock, _in_flight, _submitted
    # The kernel gives a child none of the parent's contexts, and the parent's
    # syncs end (and release their locks) in the parent.
    _contexts, _last = weakref.WeakKeyDictionary(), None
    _lock = threading.Lock()
    _in_flight = _submitted = 0


os.register_at_fork(after_in_child=_after_fork)
