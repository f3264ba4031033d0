"""Shared by the inline read and write tests: counting thread hops, holding a lock,
keeping a call in flight, asking whether a segment is flocked."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
from typing import TYPE_CHECKING, Any

import stores.local as local_module
from stores._offload import run_blocking

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

    import pytest


def record_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread of each ``os.fdatasync`` from now on, by name."""
    seen: list[str] = []
    real = os.fdatasync

    def recorded(fd: int) -> None:
        seen.append(threading.current_thread().name)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", recorded)
    return seen


def count_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the store functions run in a worker thread from now on (by
    ``run_blocking`` or ``run_io_only``)."""
    seen: list[str] = []

    def counting(real: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(fn: Callable[..., Any], *args: Any) -> Any:
            # A write in a worker is timed by the store's wrapper: name what it runs.
            inner = args[0] if getattr(fn, "__name__", "") == "_timed" else fn
            seen.append(inner.__name__)
            return await real(fn, *args)

        return counted

    for name in ("run_blocking", "run_io_only"):
        monkeypatch.setattr(local_module, name, counting(getattr(local_module, name)))
    return seen


@contextlib.contextmanager
def held_elsewhere(lock: threading.Lock) -> Iterator[None]:
    """Hold ``lock`` in another thread (a writer's worker, say) until the block ends."""
    taken, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            taken.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert taken.wait(10)
        yield
    finally:
        release.set()
        thread.join(10)


async def assert_waiting_off_the_loop(call: asyncio.Future[Any]) -> None:
    """``call`` stays pending for 20 ticks of 5 ms while the loop runs each tick."""
    ticks = 0
    for _ in range(20):
        await asyncio.sleep(0.005)
        ticks += 1
    assert not call.done()
    assert ticks == 20  # the loop was never held by the waiting call


@contextlib.asynccontextmanager
async def call_in_flight() -> AsyncIterator[None]:
    """A call of this process running in a worker: appends are concurrent."""
    gate = threading.Event()
    busy = asyncio.ensure_future(run_blocking(gate.wait, 10))
    try:
        await asyncio.sleep(0.01)
        yield
    finally:
        gate.set()
        await busy


def flock_free(path: Path) -> bool:
    """Whether another open file (as another process's) could take a shared flock."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # lets go of the lock with the file
    return True


async def until(done: Callable[[], object], what: str, *, pause: float = 0.01) -> None:
    """Wait, letting the loop run, until ``done()`` is true: 1,000 checks ``pause``
    seconds apart at most, then an ``AssertionError`` naming ``what``."""
    for _ in range(1000):
        if done():
            return
        await asyncio.sleep(pause)
    raise AssertionError(f"never: {what}")
