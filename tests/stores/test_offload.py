"""The worker-thread hand-off the local stores use instead of ``asyncio.to_thread``."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
import weakref
from typing import Any

import pytest

from stores import _offload
from stores._offload import run_blocking, run_io_only


async def test_returns_the_result_from_another_thread() -> None:
    here = threading.get_ident()
    ident, value = await run_blocking(lambda x: (threading.get_ident(), x * 2), 21)
    assert value == 42
    assert ident != here


async def test_exceptions_reach_the_awaiting_task() -> None:
    def boom() -> None:
        raise FileNotFoundError("no such segment")

    with pytest.raises(FileNotFoundError, match="no such segment"):
        await run_blocking(boom)


async def test_calls_run_concurrently() -> None:
    # Four calls that each wait for all four: they finish only if four threads run
    # them at once (as asyncio.to_thread would), not one after another.
    barrier = threading.Barrier(4, timeout=10)
    got = await asyncio.gather(*(run_blocking(barrier.wait) for _ in range(4)))
    assert sorted(got) == [0, 1, 2, 3]


async def test_a_cancelled_wait_lets_the_call_finish() -> None:
    started, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        done.set()
        return "late"

    errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
    task = asyncio.ensure_future(run_blocking(slow))
    assert await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await asyncio.to_thread(done.wait, 10)
    # The dropped result broke nothing: the workers still serve calls.
    assert await run_blocking(lambda: "next") == "next"
    assert errors == []  # handing the late result over raised nothing in the loop


def test_a_result_for_a_closed_loop_is_dropped() -> None:
    release = threading.Event()
    finished = threading.Event()

    def slow() -> None:
        release.wait(10)
        finished.set()

    pending: list[asyncio.Future[None]] = []

    async def start() -> None:
        pending.append(asyncio.ensure_future(run_blocking(slow)))
        await asyncio.sleep(0)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(start())
    loop.close()
    release.set()
    assert finished.wait(10)
    time.sleep(0.05)  # the worker hands the result to the closed loop here
    assert asyncio.run(run_blocking(lambda: "alive")) == "alive"


def test_workers_are_capped_and_reused() -> None:
    async def many() -> None:
        await asyncio.gather(*(run_blocking(time.sleep, 0.01) for _ in range(64)))

    asyncio.run(many())
    asyncio.run(many())
    live = [t for t in threading.enumerate() if t.name == "agent-journal-io"]
    assert 1 <= len(live) <= _offload._MAX_WORKERS


def test_sync_calls_run_while_every_worker_waits() -> None:
    """``run_io_only`` has threads of its own: a call there runs while every worker of
    ``run_blocking`` waits (for a lock that call would let go of, say)."""
    gate = threading.Event()

    async def scenario() -> int:
        waiting = [
            asyncio.ensure_future(run_blocking(gate.wait, 30))
            for _ in range(_offload._MAX_WORKERS + 2)
        ]
        try:
            return await asyncio.wait_for(run_io_only(lambda: 5), 10)
        finally:
            gate.set()
            await asyncio.gather(*waiting)

    assert asyncio.run(scenario()) == 5


def test_sync_threads_are_capped_and_apart_from_the_workers() -> None:
    async def many() -> None:
        await asyncio.gather(*(run_io_only(time.sleep, 0.01) for _ in range(64)))

    asyncio.run(many())
    live = [t for t in threading.enumerate() if t.name == "agent-journal-sync"]
    assert 1 <= len(live) <= _offload._MAX_WORKERS


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_workers() -> None:
    asyncio.run(run_blocking(int))  # the parent has workers now
    asyncio.run(run_io_only(int))
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads do not exist here
        code = 1
        try:
            got = asyncio.run(asyncio.wait_for(run_blocking(lambda: 7), 10))
            synced = asyncio.run(asyncio.wait_for(run_io_only(lambda: 8), 10))
            code = 0 if (got, synced) == (7, 8) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_results_that_finish_together_wake_the_loop_once() -> None:
    """Calls finishing while the loop is busy are settled by one wake-up, each with
    its own outcome (results and exceptions alike)."""
    calls = _offload._MAX_WORKERS  # each waits in a worker of its own
    release = threading.Event()
    started = threading.Semaphore(0)
    wakeups: list[object] = []

    def work(i: int) -> int:
        started.release()
        release.wait(10)
        if i % 3 == 0:
            raise ValueError(f"call {i} failed")
        return i * 10

    async def scenario() -> list[object]:
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe

        def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
            wakeups.append(callback)
            return real(callback, *args, **kwargs)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign,assignment]
        tasks = [asyncio.ensure_future(run_blocking(work, i)) for i in range(calls)]
        await asyncio.sleep(0)  # the calls are submitted
        for _ in range(calls):  # blocking the loop: the workers do not need it
            assert started.acquire(timeout=10)
        release.set()
        # The loop is blocked here while every call finishes and hands its
        # outcome over.
        handed = _offload._results_of(loop)._ready
        deadline = time.monotonic() + 10
        while len(handed) < calls and time.monotonic() < deadline:
            time.sleep(0.005)
        return await asyncio.gather(*tasks, return_exceptions=True)

    got = asyncio.run(scenario())
    for i, outcome in enumerate(got):
        if i % 3 == 0:
            assert isinstance(outcome, ValueError)
            assert str(outcome) == f"call {i} failed"
        else:
            assert outcome == i * 10
    assert len(wakeups) == 1


def test_loops_in_several_threads_each_get_their_own_results() -> None:
    def run_loop(tag: int, out: dict[int, list[tuple[int, int]]]) -> None:
        async def many() -> list[tuple[int, int]]:
            return await asyncio.gather(
                *(run_blocking(lambda i=i: (tag, i)) for i in range(200))
            )

        out[tag] = asyncio.run(many())

    out: dict[int, list[tuple[int, int]]] = {}
    threads = [threading.Thread(target=run_loop, args=(t, out)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(out) == [0, 1, 2, 3]
    for tag, results in out.items():
        assert results == [(tag, i) for i in range(200)]


def test_a_finished_loop_is_not_kept_alive() -> None:
    loop = asyncio.new_event_loop()
    assert loop.run_until_complete(run_blocking(lambda: 3)) == 3
    loop.close()
    ref = weakref.ref(loop)
    del loop
    # The worker lets go of the call's future (and so the loop) just after handing
    # its result over, which may be a moment after the loop saw the result.
    deadline = time.monotonic() + 5
    while True:
        gc.collect()
        if ref() is None or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert ref() is None
    assert asyncio.run(run_blocking(lambda: 4)) == 4
