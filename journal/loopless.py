"""Coroutines that run under an event loop or without one.

The engine's reads are coroutines, and under asyncio they are awaited as usual. A
one-shot reader (the CLI printing one thread's state) has nothing else to do while
it waits on the disk: it can drive the same coroutines itself, blocking where they
would have waited, and skip importing and starting asyncio, which is about a tenth
of a cold command. What lets one coroutine serve both:

- :func:`pause` gives the loop a turn, as ``asyncio.sleep(0)`` does (a bare
  ``yield``); without a loop it is one step of :func:`run_sync`.
- :func:`gather` runs awaitables concurrently under a loop, one after another
  without; :func:`limiter` bounds how many run at once.
- :func:`loop_running` says which of the two the caller is in.
- :func:`run_sync` drives a coroutine to its end on the calling thread.

Nothing here imports asyncio unless a loop is already running (and so imported it).
A coroutine run by :func:`run_sync` must not need a loop: the local store runs its
reads and writes inline then (``stores._offload.run_blocking``); anything that waits
on a future (a timer, a lock another task holds, a socket) gets
:class:`LoopNeededError` thrown in at that point.
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Coroutine, Generator
    from contextlib import AbstractAsyncContextManager

__all__ = ["LoopNeededError", "gather", "limiter", "loop_running", "pause", "run_sync"]

_T = TypeVar("_T")


class LoopNeededError(RuntimeError):
    """A coroutine driven by :func:`run_sync` waited on something only a loop serves."""


def loop_running() -> bool:
    """Whether an asyncio event loop is running on this thread."""
    asyncio = sys.modules.get("asyncio")
    # No loop can run in a process that never imported asyncio.
    return asyncio is not None and asyncio.events._get_running_loop() is not None


@types.coroutine
def pause() -> Generator[None, None, None]:
    """Let other tasks run before going on.

    Under asyncio this is ``asyncio.sleep(0)``: a task that yields nothing is
    scheduled again after the callbacks already due. Under :func:`run_sync` it
    returns at once.
    """
    yield


async def gather(*aws: Awaitable[_T]) -> list[_T]:
    """The results of ``aws``, in order; concurrently when a loop is running.

    Every awaitable runs to its end before the first failure (in argument order)
    is raised, so none is left running behind the caller. Without a loop they
    run one after another, and the first failure is raised at once; the ones not
    started yet are closed unawaited.

    Bound how many run at once with :func:`limiter`, inside each awaitable: a
    wrapper around it would leave it unawaited if the wrapper's task were
    cancelled before it started.
    """
    if not loop_running():
        out: list[_T] = []
        for index, aw in enumerate(aws):
            try:
                out.append(await aw)
            except BaseException:
                for rest in aws[index + 1 :]:
                    close = getattr(rest, "close", None)
                    if close is not None:
                        close()
                raise
        return out
    import asyncio

    results = await asyncio.gather(*aws, return_exceptions=True)
    done: list[_T] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        done.append(result)
    return done


def limiter(limit: int) -> AbstractAsyncContextManager[Any]:
    """A context to enter (``async with``) in each of several concurrent awaitables.

    At most ``limit`` of them are inside it at once: it is an
    ``asyncio.Semaphore`` under a loop; without one, where :func:`gather` runs
    them one after another, a context that does nothing.
    """
    if not loop_running():
        return contextlib.nullcontext()
    import asyncio

    return asyncio.Semaphore(limit)


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Drive ``coro`` to its end on this thread, with no event loop.

    Returns what ``coro`` returns, and raises what it raises.

    Raises:
        RuntimeError: A loop is running on this thread: await ``coro`` there.
        LoopNeededError: ``coro`` waited on something only a loop serves (thrown
            into it where it waited, so its cleanup runs, then raised here).
    """
    if loop_running():
        coro.close()
        raise RuntimeError("run_sync was called inside a running event loop")
    error: BaseException | None = None
    while True:
        try:
            waited = coro.send(None) if error is None else coro.throw(error)
        except StopIteration as done:
            result: _T = done.value
            return result
        error = None
        if waited is not None:
            error = LoopNeededError(
                f"a coroutine run without an event loop waited on {waited!r}"
            )
