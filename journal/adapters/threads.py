"""What every adapter shares: a writer lease per thread and a folded view per thread.

A framework calls its storage one small operation at a time (save a checkpoint, add
items, write a record). :class:`ThreadLeases` gives each operation the thread's writer:
with ``keep`` the writer stays open between operations (its lease renewed in the
background), so a busy thread pays one fence, not one per step; without it each
operation takes the lease and releases it, so several processes can take turns on one
thread. Either way a kept writer whose epoch was superseded, or whose lease ran out
while another writer committed, surfaces ``FencedError`` once and is dropped; the
next operation fences anew.

:class:`ThreadFolds` keeps, per thread, the adapter's own view folded from the
records (the adapter events the ``AgentState`` projection skips), and catches it up
from the head on each read, so a view is never older than what another process
committed before the read began.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from journal.errors import FencedError, JournalError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from journal.codec import Record
    from journal.engine import Journal, ThreadWriter
    from journal.keys import ThreadKey

__all__ = ["ThreadFolds", "ThreadLeases", "ThreadView"]

S = TypeVar("S")


class ThreadLeases:
    """The writers one adapter instance holds, one per thread.

    Args:
        journal: Where the threads live.
        holder: The lease holder id (default: a new unique id per instance). Two
            instances with one holder id take each other's lease over, as a restarted
            process does; the one taken over is fenced.
        lease_ttl: Lease duration in seconds, renewed in the background at half.
        wait: Seconds an operation waits for another holder's lease (0: fail at once).
        keep: Keep each thread's writer between operations (until :meth:`release`
            or :meth:`aclose`); False takes and releases the lease per operation.

    Raises:
        ValueError: ``lease_ttl`` is not positive or ``wait`` is negative.
    """

    def __init__(
        self,
        journal: Journal,
        *,
        holder: str | None = None,
        lease_ttl: float = 30.0,
        wait: float = 0.0,
        keep: bool = True,
    ) -> None:
        if lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, not {lease_ttl}")
        if wait < 0:
            raise ValueError(f"wait must be >= 0, not {wait}")
        self.journal = journal
        self.holder = holder or f"adapter-{uuid.uuid4().hex[:12]}"
        self.lease_ttl = lease_ttl
        self.wait = wait
        self.keep = keep
        self._writers: dict[ThreadKey, ThreadWriter] = {}
        self._held: set[ThreadKey] = set()
        # One lock per event loop and thread: an asyncio lock is bound to its loop,
        # and an instance used from several loops (threads) still queues per loop
        # while the lease itself serializes the loops.
        self._locks: dict[tuple[int, ThreadKey], asyncio.Lock] = {}
        self._holders: dict[int, str] = {}
        self._holders_lock = threading.Lock()

    @contextlib.asynccontextmanager
    async def writing(self, key: ThreadKey) -> AsyncIterator[ThreadWriter]:
        """Hold the thread's writer for one operation; operations on a thread queue.

        Raises:
            FencedError: The kept writer was taken over since the last operation,
                or its lease ran out and another writer committed meanwhile (it is
                dropped; the next operation acquires anew), or during this one.
            LeaseHeldError: Another holder's lease is live past ``wait``.
        """
        async with self._lock(key):
            writer = self._writers.pop(key, None)
            if writer is not None and not writer.lease_valid:
                # A lease that ran out (a stalled process) is only renewed by a new
                # acquire if no one wrote meanwhile: a commit by another writer
                # means this one was taken over, and what it was doing is stale.
                fenced = writer.fenced or await self.journal.head(key) != writer.version
                with contextlib.suppress(Exception):
                    await writer.close()
                if fenced:
                    raise FencedError(
                        writer.label,
                        writer.epoch,
                        None,
                        "taken over between operations",
                    )
                writer = None
            if writer is None:
                writer = await self.journal.acquire(
                    key,
                    self._holder(),
                    lease_ttl=self.lease_ttl,
                    wait=self.wait,
                    defer_fence=True,
                )
            try:
                yield writer
            except BaseException as exc:
                # A journal error or a cancellation may leave the writer fenced or
                # mid-commit: the next operation starts from a fresh acquire. An
                # adapter's own refusal (a stale revision) leaves it as it was.
                if isinstance(exc, JournalError) or not isinstance(exc, Exception):
                    await writer.close()
                else:
                    await self._park(key, writer)
                raise
            await self._park(key, writer)

    async def _park(self, key: ThreadKey, writer: ThreadWriter) -> None:
        if (self.keep or key in self._held) and not writer.fenced:
            self._writers[key] = writer
        else:
            await writer.close()

    @contextlib.asynccontextmanager
    async def holding(self, key: ThreadKey) -> AsyncIterator[None]:
        """Hold the thread's lease for a span of operations, then release it.

        What a framework reads inside is what the next write builds on: no other
        holder can commit to the thread between. Spans on one thread do not nest.

        Raises:
            LeaseHeldError: Another holder's lease is live past ``wait``.
        """
        self._held.add(key)
        try:
            async with self.writing(key):
                pass
            yield
        finally:
            self._held.discard(key)
            await self.release(key)

    def _holder(self) -> str:
        """The holder id for this event loop: ``holder`` for the first loop to write.

        One instance used from several event loops (threads) must not take its own
        lease over from one loop to another, as a restarted process may: each
        further loop holds leases under an id of its own and waits its turn.
        """
        loop = id(asyncio.get_running_loop())
        with self._holders_lock:
            if loop not in self._holders:
                suffix = f"~{len(self._holders)}" if self._holders else ""
                self._holders[loop] = self.holder + suffix
            return self._holders[loop]

    def _lock(self, key: ThreadKey) -> asyncio.Lock:
        return self._locks.setdefault(
            (id(asyncio.get_running_loop()), key), asyncio.Lock()
        )

    async def release(self, key: ThreadKey) -> None:
        """Close the thread's kept writer, releasing its lease (no-op if none)."""
        async with self._lock(key):
            writer = self._writers.pop(key, None)
            if writer is not None:
                await writer.close()

    async def aclose(self) -> None:
        """Close every kept writer, releasing the leases."""
        for key in list(self._writers):
            await self.release(key)


@dataclass
class ThreadView(Generic[S]):
    """An adapter's folded view of one thread, as of ``version``."""

    version: int
    state: S


class ThreadFolds(Generic[S]):
    """Per-thread views folded from the records, caught up from the log on read.

    Args:
        journal: Where the threads live.
        initial: A new, empty view.
        apply: Folds one record into a view, in place.
    """

    def __init__(
        self,
        journal: Journal,
        initial: Callable[[], S],
        apply: Callable[[S, Record], None],
    ) -> None:
        self.journal = journal
        self._initial = initial
        self._apply = apply
        self._views: dict[ThreadKey, ThreadView[S]] = {}
        # An adapter object may be used from several event loops in threads (the
        # SDKs' sync entry points do): views change only under this lock, which is
        # never held across an await.
        self._mutex = threading.Lock()

    async def read(self, key: ThreadKey) -> S:
        """The thread's view as of its head now."""
        return await self.upto(key, await self.journal.head(key))

    async def upto(self, key: ThreadKey, version: int) -> S:
        """The thread's view as of at least ``version`` (a writer's head)."""
        with self._mutex:
            view = self._views.get(key)
            if view is None or view.version > version:
                # A view ahead of the log belongs to a thread erased and begun again.
                view = ThreadView(0, self._initial())
                self._views[key] = view
            start = view.version
        if start < version:
            records = [r async for r in self.journal.records(key, start=start + 1)]
            with self._mutex:
                # Another event loop (thread) may have folded some of them meanwhile.
                for record in records:
                    if record.version == view.version + 1:
                        self._apply(view.state, record)
                        view.version = record.version
        return view.state

    def committed(self, key: ThreadKey, record: Record) -> None:
        """Fold a record this process just committed, if the view is right behind."""
        with self._mutex:
            view = self._views.get(key)
            if view is not None and view.version == record.version - 1:
                self._apply(view.state, record)
                view.version = record.version
            elif view is None or view.version < record.version:
                self._views.pop(key, None)

    def forget(self, key: ThreadKey) -> None:
        """Drop the thread's view (it is rebuilt from the log on the next read)."""
        with self._mutex:
            self._views.pop(key, None)
