"""journal.loopless: one coroutine, driven with an event loop or without one."""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest

from journal.loopless import (
    LoopNeededError,
    gather,
    limiter,
    loop_running,
    pause,
    run_sync,
)


async def _steps(log: list[str], name: str, n: int) -> str:
    for i in range(n):
        log.append(f"{name}{i}")
        await pause()
    return name


def test_run_sync_returns_what_the_coroutine_returns_through_pauses():
    log: list[str] = []
    assert run_sync(_steps(log, "a", 3)) == "a"
    assert log == ["a0", "a1", "a2"]


def test_run_sync_raises_what_the_coroutine_raises():
    async def fails() -> None:
        await pause()
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        run_sync(fails())


def test_no_loop_runs_in_run_sync_and_one_does_under_asyncio():
    async def where() -> bool:
        await pause()
        return loop_running()

    assert run_sync(where()) is False
    assert asyncio.run(where()) is True


class _Pending:
    """Awaits as an asyncio future does: it yields itself to whoever drives it."""

    def __await__(self):
        yield self


def test_waiting_on_a_future_is_refused_and_the_coroutine_cleans_up():
    cleaned: list[str] = []

    async def sleeps() -> None:
        try:
            await _Pending()  # what a timer, a lock or a socket awaits
        finally:
            cleaned.append("finally")

    with pytest.raises(LoopNeededError, match="without an event loop"):
        run_sync(sleeps())
    assert cleaned == ["finally"]


def test_run_sync_inside_a_running_loop_is_refused_and_closes_the_coroutine():
    async def outer() -> None:
        inner = _steps([], "x", 1)
        with pytest.raises(RuntimeError, match="running event loop"):
            run_sync(inner)
        assert inner.cr_frame is None  # closed, so no "never awaited" warning

    asyncio.run(outer())


def test_pause_lets_other_tasks_run_under_asyncio():
    log: list[str] = []

    async def both() -> list[str]:
        return await gather(_steps(log, "a", 2), _steps(log, "b", 2))

    assert asyncio.run(both()) == ["a", "b"]
    assert log == ["a0", "b0", "a1", "b1"]  # interleaved at each pause


def test_gather_without_a_loop_runs_one_after_another():
    log: list[str] = []
    assert run_sync(gather(_steps(log, "a", 2), _steps(log, "b", 2))) == ["a", "b"]
    assert log == ["a0", "a1", "b0", "b1"]


def test_gather_without_a_loop_stops_at_the_first_failure_and_closes_the_rest():
    async def fails() -> str:
        raise ValueError("first")

    log: list[str] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # a finalizer's warning is recorded
        with pytest.raises(ValueError, match="first"):
            run_sync(gather(fails(), _steps(log, "b", 1)))
        gc.collect()
    assert [str(w.message) for w in seen if "never awaited" in str(w.message)] == []
    assert log == []


def test_gather_under_a_loop_finishes_every_awaitable_before_raising_the_first():
    finished: list[str] = []

    async def fails(name: str, delay: float) -> str:
        await asyncio.sleep(delay)
        finished.append(name)
        raise ValueError(name)

    async def ok() -> str:
        await asyncio.sleep(0.02)
        finished.append("ok")
        return "ok"

    async def main() -> None:
        with pytest.raises(ValueError, match="slow"):
            await gather(fails("slow", 0.01), fails("fast", 0), ok())
        assert sorted(finished) == ["fast", "ok", "slow"]

    asyncio.run(main())


def test_a_limiter_bounds_how_many_run_at_once_under_a_loop():
    running = 0
    most = 0

    async def one(i: int, sem: Any) -> int:
        nonlocal running, most
        async with sem:
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.001)
            running -= 1
        return i

    async def main() -> list[int]:
        sem = limiter(3)
        return await gather(*(one(i, sem) for i in range(12)))

    assert asyncio.run(main()) == list(range(12))
    assert most == 3


def test_a_limiter_without_a_loop_does_nothing():
    async def one(i: int, sem: Any) -> int:
        async with sem:
            await pause()
        return i

    async def main() -> list[int]:
        sem = limiter(1)
        return await gather(*(one(i, sem) for i in range(3)))

    assert run_sync(main()) == [0, 1, 2]


def test_gather_cancelled_before_its_tasks_start_leaves_nothing_unawaited():
    """A task cancelled right after it called gather: every awaitable handed over
    is a task's own coroutine, so none is left never awaited."""

    async def one(sem: Any) -> None:
        async with sem:
            await asyncio.sleep(1)

    async def caller() -> None:
        sem = limiter(2)
        await gather(*(one(sem) for _ in range(5)))

    async def main() -> None:
        task = asyncio.create_task(caller())
        await asyncio.sleep(0)  # gather made its tasks; none has started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # a finalizer's warning is recorded
        asyncio.run(main())
        gc.collect()
    assert [str(w.message) for w in seen if "never awaited" in str(w.message)] == []
