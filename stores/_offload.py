"""Run the local stores' blocking file I/O in worker threads, with a light hand-off.

``asyncio.to_thread`` costs 80-120 µs per call on the machines we measured, for a
function that does nothing: it copies the context, goes through
``ThreadPoolExecutor.submit`` and chains a ``concurrent.futures.Future`` to an
asyncio one. A durable commit is one such hop around ~100-200 µs of ``pwrite`` and
``fdatasync``. :func:`run_blocking` puts ``(future, function, args)`` on a
``queue.SimpleQueue`` that worker threads block on, and the worker hands the result
back with ``call_soon_threadsafe``: 30-80 µs for the same no-op (the thread wake-ups
dominate, and vary with where the scheduler runs the threads), and a durable commit
about 5-8% faster (``benchmarks/bench_commit.py`` compares the two). Results that
finish while the loop has not yet woken for an earlier one join it: one wake-up
settles them all (see :class:`_Results`).

Semantics match ``asyncio.to_thread`` where the stores rely on them: calls run
concurrently, up to ``min(32, cpu_count + 4)`` threads (asyncio's default executor
size); cancelling the awaiting task does not stop the call, whose result is then
dropped; exceptions propagate to the awaiting task. Context variables are not
copied: store functions do not read them. The threads are daemons, and an ``atexit``
hook lets each finish the call it is running (for 5 seconds at most) before the
interpreter goes down, as ``asyncio.run`` does for its executor. A forked child
starts with no threads.

:func:`run_io_only` is the same on a second pool of the same size, kept for calls that
wait on nothing but I/O: the sync of an append written on the event loop, which
holds its segment's locks until that sync returns. A worker of the first pool may
be waiting for those locks; with every worker waiting, a sync queued behind them
would never run.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

from journal.loopless import loop_running

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

__all__ = ["in_flight", "run_blocking", "run_io_only", "settle"]

_T = TypeVar("_T")
_MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)


def settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Give ``future`` its result (``ok``) or exception, on the future's loop.

    Nothing when it is done already: the awaiting task was cancelled meanwhile.
    """
    if future.done():  # the awaiting task was cancelled meanwhile
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class _Results:
    """The results the workers hand back to one event loop, settled in batches.

    A worker adds its result and wakes the loop (``call_soon_threadsafe``: a write
    to the loop's self-pipe) only when no earlier result is waiting: that one's
    wake-up takes this one too. When many calls finish at once (64 sessions each
    syncing an append), the loop then wakes once for all of them, and fewer
    workers take the interpreter lock a second time just to write to the pipe:
    each such take is one more the loop waits for around its own system calls.

    The loop is held weakly: a worker holds this object only while it hands a
    result over, and the registry (:func:`_results_of`) must not keep a loop alive.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self._lock = threading.Lock()
        self._ready: list[tuple[asyncio.Future[Any], bool, Any]] = []

    def put(self, future: asyncio.Future[Any], ok: bool, value: Any) -> None:
        """Hand ``future`` its outcome, from a worker thread."""
        with self._lock:
            self._ready.append((future, ok, value))
            if len(self._ready) > 1:
                return  # the loop is being woken already and will take this too
        try:
            # The future holds its loop, so the loop is alive here.
            future.get_loop().call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody waits for these
            with self._lock:
                self._ready.clear()

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for future, ok, value in ready:
            settle(future, ok, value)


_registry: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Results] = (
    weakref.WeakKeyDictionary()
)
_registry_lock = threading.Lock()  # loops may run in several threads at once
_last: _Results | None = None  # the last loop's: most processes run one loop


def _results_of(loop: asyncio.AbstractEventLoop) -> _Results:
    global _last
    results = _last
    if results is not None and results.loop() is loop:
        return results
    with _registry_lock:
        results = _registry.get(loop)
        if results is None:
            results = _registry[loop] = _Results(loop)
    _last = results
    return results


_Call = tuple["asyncio.Future[Any]", _Results, "Callable[..., Any]", tuple[Any, ...]]


class _Workers:
    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self.in_flight = 0  # calls submitted and not yet finished

    def submit(self, call: _Call) -> None:
        self._queue.put(call)
        with self._lock:
            self.in_flight += 1
            if self._idle:
                self._idle -= 1  # an idle worker will take it
                return
            if len(self._threads) >= _MAX_WORKERS:
                return  # the next worker to finish takes it
            thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        get = self._queue.get
        while True:
            call = get()
            if call is None:
                return
            future, results, fn, args = call
            try:
                result: tuple[bool, Any] = (True, fn(*args))
            except BaseException as exc:  # handed to the awaiting task
                result = (False, exc)
            del call, fn, args
            with self._lock:
                self._idle += 1
                self.in_flight -= 1
            # Handing the result over is the last thing before blocking on the queue
            # (which releases the GIL): the woken loop then finds the GIL free
            # instead of waiting for this thread to let go of it.
            results.put(future, *result)
            del future, result, results

    def stop(self, timeout: float = 5.0) -> None:
        """Let every worker finish its current call, then end it.

        Waits ``timeout`` seconds at most in all: a call blocked for good (on the
        ``flock`` of a stopped process, say) must not hang the interpreter's exit.
        """
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


_workers = _Workers("agent-journal-io")
# Syncs of appends written on the loop (``run_io_only``) have threads of their own: an
# append there holds its segment's locks until its sync returns, and a worker of
# the pool above may be waiting for those very locks; were all of them waiting,
# a sync queued behind them would never run.
_syncers = _Workers("agent-journal-sync")


def _after_fork() -> None:
    global _workers, _syncers  # the parent's threads do not exist in the child
    global _registry, _registry_lock, _last
    _workers, _syncers = _Workers("agent-journal-io"), _Workers("agent-journal-sync")
    # A parent thread may have held the lock at the fork; the parent's loops are
    # not the child's to run.
    _registry, _registry_lock, _last = (
        weakref.WeakKeyDictionary(),
        threading.Lock(),
        None,
    )


def _stop_all() -> None:
    _workers.stop()
    _syncers.stop()


os.register_at_fork(after_in_child=_after_fork)
atexit.register(_stop_all)


def in_flight() -> int:
    """How many calls handed to worker threads (both kinds) have not finished yet."""
    return _workers.in_flight + _syncers.in_flight


async def run_blocking(fn: Callable[..., _T], *args: Any) -> _T:
    """Run ``fn(*args)`` in a worker thread and return its result.

    With no event loop running (a coroutine driven by ``journal.loopless.run_sync``)
    it runs here instead: there is no loop to keep free, and the caller waits for
    the result either way.

    Raises:
        BaseException: Whatever ``fn`` raised.
    """
    if not loop_running():
        return fn(*args)
    return await _submitted(_workers, fn, args)


async def run_io_only(fn: Callable[..., _T], *args: Any) -> _T:
    """:func:`run_blocking` on threads kept for calls that wait on nothing but I/O.

    For finishing an append written on the loop: its sync, then letting go of the
    locks it holds. Such a call must never wait for a lock (or for anything a
    call of :func:`run_blocking` may hold): these threads are its guarantee of
    running while every other worker waits.

    Raises:
        BaseException: Whatever ``fn`` raised.
    """
    if not loop_running():
        return fn(*args)
    return await _submitted(_syncers, fn, args)


def _submitted(
    workers: _Workers, fn: Callable[..., _T], args: tuple[Any, ...]
) -> asyncio.Future[_T]:
    import asyncio  # loaded already: a loop is running

    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()
    workers.submit((future, _results_of(loop), fn, args))
    return future
