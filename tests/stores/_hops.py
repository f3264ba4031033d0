"""Shared by the inline read and write tests: counting thread hops, holding a lock."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING, Any

import stores.local as local_module

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import pytest


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
