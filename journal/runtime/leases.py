"""Thread leases an agent keeps between operations, so a warm call pays no fence.

After an operation an :class:`Agent` parks the thread's writer instead of closing it:
the writer keeps its lease (renewed in the background), its epoch and the state it
holds. The next operation on the thread takes the parked writer back and commits at
once: no new ``LEASE`` epoch, no fence record, no reload. A parked writer's lease
is marked *idle* (after ``hold`` seconds, by default at once), and an idle lease
may be taken by any other holder immediately, so another instance serving the
thread never waits for an idle one; the parked writer's busy mark then fails and
the next operation starts over from the log. A writer parked for ``keep`` seconds
is closed, releasing the lease.

A new writer defers its fence to its first record (``defer_fence``), so an
operation that commits nothing writes nothing to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from journal.errors import JournalError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from journal.engine import Journal, ThreadWriter
    from journal.keys import ThreadKey
    from journal.runtime.locks import ThreadLocks

__all__ = ["WarmLeases"]

logger = logging.getLogger("journal.runtime")


class _Parked:
    """A writer between operations, with the timers that idle and close it."""

    def __init__(self, writer: ThreadWriter) -> None:
        self.writer = writer
        self.timer: asyncio.Task[None] | None = None


class WarmLeases:
    """The writers one agent keeps between operations, one per thread.

    Args:
        journal: Where the threads live.
        holder: The agent's lease holder id.
        ttl: The lease duration.
        wait: How long to wait for another holder's busy lease.
        locks: The agent's per-thread locks: a parked writer is only touched under
            its thread's lock.
        keep: Seconds a writer stays parked (0: close it after each operation).
        hold: Seconds a parked writer's lease stays busy before it is marked idle
            (0: idle at once).
    """

    def __init__(
        self,
        journal: Journal,
        holder: str,
        ttl: float,
        wait: float,
        locks: ThreadLocks,
        *,
        keep: float,
        hold: float,
    ) -> None:
        self.journal = journal
        self.holder = holder
        self.ttl = ttl
        self.wait = wait
        self.keep = keep
        self.hold = hold
        self._locks = locks
        self._parked: dict[ThreadKey, _Parked] = {}

    @property
    def warm(self) -> list[ThreadKey]:
        """The threads with a parked writer."""
        return list(self._parked)

    @contextlib.asynccontextmanager
    async def writer(
        self, key: ThreadKey, wait: float | None = None
    ) -> AsyncIterator[ThreadWriter]:
        """The thread's writer for one operation; call with the thread's lock held.

        A parked writer is taken back when its lease is still ours; otherwise a new
        one acquires the lease (waiting up to ``wait``, default the agent's).
        """
        writer = await self._take_back(key)
        if writer is None:
            writer = await self.journal.acquire(
                key,
                self.holder,
                lease_ttl=self.ttl,
                wait=self.wait if wait is None else wait,
                defer_fence=True,
            )
        try:
            yield writer
        finally:
            await self._park(key, writer)

    async def _take_back(self, key: ThreadKey) -> ThreadWriter | None:
        parked = self._parked.pop(key, None)
        if parked is None:
            return None
        if parked.timer is not None:
            parked.timer.cancel()
        writer = parked.writer
        try:
            kept = writer.lease_valid and (
                not writer.idle or await writer.set_idle(False)
            )
        except BaseException:
            # Cancelled mid-mark: the writer is neither parked nor handed out.
            await _close_shielded(writer)
            raise
        if kept:
            return writer
        # Taken by another holder while idle (or the lease lapsed): start over.
        await _close(writer)
        return None

    async def _park(self, key: ThreadKey, writer: ThreadWriter) -> None:
        # A run left open in the writer's own state (its last commit failed) is
        # recovered by the next writer to acquire the lease: do not keep this one.
        if (
            self.keep <= 0
            or not writer.lease_valid
            or writer.state.active_run_id is not None
        ):
            await _close(writer)
            return
        parked = _Parked(writer)
        try:
            marked = self.hold > 0 or await writer.set_idle(True)
        except BaseException:
            # Cancelled mid-mark: not parked yet, so nothing else would close it
            # and its renewal would keep the lease busy for good.
            await _close_shielded(writer)
            raise
        if not marked:
            await _close(writer)
            return
        self._parked[key] = parked
        parked.timer = asyncio.get_running_loop().create_task(
            self._expire(key, parked), name=f"warm lease {key}"
        )

    async def _expire(self, key: ThreadKey, parked: _Parked) -> None:
        """Mark the lease idle after ``hold``, close the writer after ``keep``."""
        try:
            if self.hold > 0:
                await asyncio.sleep(self.hold)
                async with self._locks.hold(key):
                    if self._parked.get(key) is not parked:
                        return
                    if not await parked.writer.set_idle(True):
                        del self._parked[key]
                        await _close(parked.writer)
                        return
            await asyncio.sleep(max(0.0, self.keep - self.hold))
            async with self._locks.hold(key):
                if self._parked.get(key) is parked:
                    del self._parked[key]
                    await _close(parked.writer)
        except asyncio.CancelledError:
            return  # taken back by an operation, or the agent closed

    async def close(self) -> None:
        """Close every parked writer (their leases are released)."""
        while self._parked:
            _, parked = self._parked.popitem()
            if parked.timer is not None:
                parked.timer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await parked.timer
            await _close(parked.writer)


async def _close(writer: ThreadWriter) -> None:
    try:
        await writer.close()
    except JournalError as exc:
        logger.warning("%s: closing a kept writer failed: %s", writer.label, exc)


_closing: set[asyncio.Task[None]] = set()
"""Closes in flight whose waiter was cancelled (strong references until done)."""


async def _close_shielded(writer: ThreadWriter) -> None:
    """Close ``writer`` even if the awaiting task is cancelled (again) meanwhile."""
    task = asyncio.ensure_future(_close(writer))
    _closing.add(task)
    task.add_done_callback(_closing.discard)
    await asyncio.shield(task)
