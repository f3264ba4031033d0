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
Python thread is involved, the loop submits with one system call and reaps many
ends with another. Measured with 64 sessions appending 120 turns each on ext4:
1.55-1.85x the turns per second of the threads, about 2 context switches a turn
(see ``benchmarks/README.md`` for the benchmark's figures).

Each event loop gets its own AIO context (``io_setup``) and ``eventfd``, made on
first use. A sync's *completion* (the function given to :meth:`KernelSyncs.submit`:
index the frame, let go of the segment's locks) runs in whichever thread reaps its
event, normally the loop's; its result then settles the awaiting future. A
completion must run even if nobody awaits it any more, or the segment's locks
would stay taken: when the awaiting task is cancelled, or its coroutine is closed
(a loop closed with the task pending), a daemon thread waits for that sync's end
in the kernel and runs its completion (:meth:`KernelSyncs.wait`).

Nothing here is required: where the kernel or a sandbox refuses the context
(``ENOSYS``, ``EPERM``, ``EAGAIN`` past ``fs.aio-max-nr``), on an architecture
whose system call numbers are not listed here, or when a submission is refused
(the context's ring full, a file without an AIO sync), the caller gets None and
hands the sync to a worker thread as before. A forked child starts without
contexts: the kernel does not carry them over.
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import struct
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Generic, TypeVar

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
_RING = 1024  # syncs in flight per loop before submissions are refused
_BATCH = 128  # events taken per io_getevents
# The kernel or a sandbox will not give this process a context at all.
_REFUSED = frozenset({errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP})

_lock = threading.Lock()
_in_flight = 0
_submitted = 0
_usable: bool | None = None  # None: not tried yet
_abi: _Abi | None = None
_contexts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, KernelSyncs | None] = (
    weakref.WeakKeyDictionary()
)


def in_flight() -> int:
    """How many syncs of this process the kernel has not finished yet."""
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
        numbers = _NUMBERS.get(platform.machine())
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
    import asyncio  # loaded already: a loop is running

    loop = asyncio.get_running_loop()
    try:
        return _contexts[loop]
    except KeyError:
        pass
    abi = _load()
    syncs = None if abi is None else KernelSyncs.open(abi, loop)
    _contexts[loop] = syncs
    return syncs


class _Op(Generic[_T]):
    """One sync submitted to the kernel, and what to do when it ends."""

    __slots__ = ("complete", "finished", "future")

    def __init__(
        self, future: asyncio.Future[_T], complete: Callable[[OSError | None], _T]
    ) -> None:
        self.future = future
        self.complete = complete
        self.finished = False


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # the awaiting task was cancelled meanwhile
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


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
        self._ops: dict[int, _Op[Any]] = {}
        self._next = 0
        # Taken by whichever thread reaps: the loop's reader tries it, a thread
        # waiting out an orphaned sync blocks on it.
        self._reaping = threading.Lock()
        self._iocb = ctypes.create_string_buffer(_IOCB.size)
        self._iocbs = (ctypes.c_void_p * 1)(ctypes.addressof(self._iocb))
        self._events = ctypes.create_string_buffer(_EVENT.size * _BATCH)
        self._no_wait = (ctypes.c_long * 2)(0, 0)
        self._long = ctypes.c_long
        self._pid = os.getpid()
        import asyncio  # loaded already: a loop is running

        self._running_loop = asyncio.events._get_running_loop
        loop.add_reader(self._efd, self._on_ready)
        weakref.finalize(loop, self._close)

    @classmethod
    def open(cls, abi: _Abi, loop: asyncio.AbstractEventLoop) -> KernelSyncs | None:
        """A context for ``loop``, or None when the kernel refuses one."""
        global _usable
        ctx = abi.ctypes.c_ulong(0)
        if abi.call(abi.setup, abi.ctypes.c_long(_RING), abi.ctypes.byref(ctx)) < 0:
            if abi.errno() in _REFUSED:
                _usable = False  # no loop of this process will get one
            return None  # EAGAIN: fs.aio-max-nr reached for now
        return cls(abi, loop, ctx.value)

    def submit(
        self, fd: int, complete: Callable[[OSError | None], _T]
    ) -> _Op[_T] | None:
        """Start an ``fdatasync`` of ``fd``; ``complete`` runs when it ends.

        ``complete`` gets the sync's error (None when it succeeded), in whichever
        thread reaps the sync's end, and its result or exception is the outcome
        :meth:`wait` returns.

        Returns:
            The sync in flight, or None when the kernel refused it (nothing was
            submitted, ``complete`` will not run): the caller syncs another way.
        """
        abi = self._abi
        self._next += 1
        key = self._next
        _IOCB.pack_into(
            self._iocb, 0, key, 0, 0, _CMD_FDSYNC, 0, fd, 0, 0, 0, 0, _FLAG_RESFD,
            self._efd,
        )  # fmt: skip
        loop = self._loop()
        assert loop is not None  # noqa: S101 - called on the running loop
        op: _Op[_T] = _Op(loop.create_future(), complete)
        # Counted and listed before the kernel has it: a thread waiting out an
        # orphaned sync may reap its end before io_submit returns.
        self._ops[key] = op
        _count(1, 1)
        if abi.call(abi.submit, self._ctx, self._long(1), self._iocbs) != 1:
            del self._ops[key]  # EAGAIN (ring full), EINVAL (no AIO sync here)...
            _count(-1, -1)
            return None
        return op

    async def wait(self, op: _Op[_T]) -> _T:
        """The outcome of ``op``'s completion, once the kernel has synced.

        If the awaiting task is cancelled, or its coroutine closed, before the
        sync ends, a daemon thread waits for the end and runs the completion.

        Raises:
            BaseException: Whatever the completion raised.
        """
        try:
            return await op.future
        except BaseException:
            if not op.finished:
                threading.Thread(
                    target=self._wait_out,
                    args=(op,),
                    name="agent-journal-orphaned-sync",
                    daemon=True,
                ).start()
            raise

    def _on_ready(self) -> None:
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            return
        if not self._reaping.acquire(blocking=False):
            return  # a thread is reaping: it wakes the loop again when done
        try:
            self._reap(None)
        finally:
            self._reaping.release()

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
        while until is None or not until.finished:
            if until is None:
                got = abi.call(
                    abi.getevents, self._ctx, long(0), long(_BATCH), events,
                    self._no_wait,
                )  # fmt: skip
            else:
                got = abi.call(
                    abi.getevents, self._ctx, long(1), long(_BATCH), events, None
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
            _settle(future, *outcome)
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it
            future.get_loop().call_soon_threadsafe(_settle, future, *outcome)

    def _close(self) -> None:
        # The loop is gone: run what is still in flight, then free the context.
        if self._pid != os.getpid():
            return  # a forked child's copy: the context and the eventfd are not its
        if self._ops:
            with self._reaping:
                for op in list(self._ops.values()):
                    self._reap(op)
        self._abi.call(self._abi.destroy, self._ctx)
        os.close(self._efd)


def _after_fork() -> None:
    global _contexts, _lock, _in_flight, _submitted
    # The kernel gives a child none of the parent's contexts, and the parent's
    # syncs end (and release their locks) in the parent.
    _contexts = weakref.WeakKeyDictionary()
    _lock = threading.Lock()
    _in_flight = _submitted = 0


os.register_at_fork(after_in_child=_after_fork)
