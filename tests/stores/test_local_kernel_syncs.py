"""Concurrent appends hand their ``fdatasync`` to the kernel (Linux native AIO).

When several threads' logs are appended to at once, the local store writes each
frame on the event loop and submits its ``fdatasync`` to the kernel
(``stores._kernel_sync``); the loop reaps the syncs' ends from an ``eventfd`` and
only then indexes each frame and lets go of its segment's locks. These tests run
against the real kernel interface: the only thing stood in for is the moment the
loop reaps (held back by a gate), and, once, the result the kernel reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import gc
import os
import threading
from typing import TYPE_CHECKING, Any

import pytest

import stores.local as local_module
from journal.errors import ObjectExistsError, StorageError
from stores import _kernel_sync
from stores._kernel_sync import KernelSyncs
from stores.local import LocalStore
from tests.stores._hops import (
    assert_waiting_off_the_loop,
    call_in_flight,
    count_hops,
    flock_free,
    record_syncs,
    until,
)

if TYPE_CHECKING:
    from pathlib import Path


def _rec(version: int, thread: str = "t") -> str:
    return f"{thread}/log/{version:020d}.rec"


@pytest.fixture(autouse=True)
def steady_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget no sync of a busy machine outlasts: the tests check the rules."""
    monkeypatch.setattr(local_module, "INLINE_WRITE_BUDGET", 60.0)


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the store functions run in a worker thread."""
    return count_hops(monkeypatch)


class _GatedReaper:
    """Holds back the loop's reaping of ended syncs until :meth:`open`.

    Installed before the loop's context is made (its reader is bound then). The
    kernel's end of each sync stays queued in the context until reaped.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.is_open = False
        self.held: list[KernelSyncs] = []
        real = KernelSyncs._on_ready

        def gated(syncs: KernelSyncs) -> None:
            if self.is_open:
                real(syncs)
                return
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(syncs._efd)  # else the loop would spin on it
            self.held.append(syncs)

        monkeypatch.setattr(KernelSyncs, "_on_ready", gated)

    async def until_held(self) -> None:
        await until(lambda: self.held, "a sync ended in the kernel")

    def open(self) -> None:
        self.is_open = True
        for syncs in self.held:
            os.eventfd_write(syncs._efd, 1)  # wake the reader for what it missed


async def _store_with_one_record(tmp_path: Path) -> tuple[LocalStore, Path]:
    """A store whose thread ``t`` holds record 1 (its segment's first append, whose
    directory sync runs in a worker), and that segment's path."""
    store = LocalStore(tmp_path)
    await store.create(_rec(1), b"one")
    return store, next((tmp_path / "t" / "log").glob(".seg-*"))


async def test_concurrent_appends_hand_their_syncs_to_the_kernel(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight threads appended to at once: every append after each segment's first
    (which syncs its directory too, in a worker) is synced by the kernel, none by
    ``os.fdatasync``; all read back, here and from a fresh store. One thread
    appended alone afterwards is synced on the loop again, from its second append
    on at the latest (its first may follow an append to another thread)."""
    # A window no stall of a busy machine outlasts: the test checks the rule.
    monkeypatch.setattr(local_module, "_CONCURRENT_WINDOW", 60.0)
    synced_by_os = record_syncs(monkeypatch)
    store = LocalStore(tmp_path)
    threads = [f"t{i}" for i in range(8)]
    before = _kernel_sync.submitted()
    for version in range(1, 11):
        await asyncio.gather(
            *(
                store.create(_rec(version, t), f"{t}-{version}".encode())
                for t in threads
            )
        )
    by_kernel = _kernel_sync.submitted() - before
    # Each append was synced once, one way or the other.
    assert by_kernel + len(synced_by_os) == 80
    # Only each segment's first append hops (its directory is synced too), and a
    # round's first append may follow one to its own thread, which made it look
    # alone: it runs on the loop. Every other sync is the kernel's.
    assert hops.count("_finish_append") <= len(threads)
    loop_thread = threading.current_thread().name
    assert len([t for t in synced_by_os if t != loop_thread]) <= len(threads)
    assert by_kernel >= 80 - len(threads) - 10
    assert _kernel_sync.in_flight() == 0
    keys = [_rec(v, t) for t in threads for v in range(1, 11)]
    want = [f"{t}-{v}".encode() for t in threads for v in range(1, 11)]
    assert await store.read_many(keys) == want
    hops.clear()
    synced_by_os.clear()
    await store.create(_rec(11, "t0"), b"alone")
    await store.create(_rec(12, "t0"), b"alone again")
    # The first may follow the last round's last append to another thread.
    first_by_kernel = _kernel_sync.submitted() - before - by_kernel
    assert first_by_kernel in (0, 1)
    assert hops == []
    assert synced_by_os == [loop_thread] * (2 - first_by_kernel)
    await store.aclose()
    fresh = LocalStore(tmp_path)
    assert await fresh.read_many(keys) == want
    assert (await fresh.read(_rec(12, "t0")))[0] == b"alone again"
    await fresh.aclose()


async def test_a_kernel_synced_append_keeps_its_locks_until_its_end_is_reaped(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frame is written on the loop and synced by the kernel; until the loop
    reaps the sync's end the segment stays locked, so no reader, of this process
    or another, indexes a frame before it is durable."""
    gate = _GatedReaper(monkeypatch)
    store, segment = await _store_with_one_record(tmp_path)
    payload = b"two: written on the loop, synced by the kernel"
    async with call_in_flight():
        hops.clear()
        write = asyncio.ensure_future(store.create(_rec(2), payload))
        await gate.until_held()
        assert hops == []
        assert payload in segment.read_bytes()  # written, in the page cache
        assert not flock_free(segment)
        assert store._segs.segment(str(segment)).lock.locked()
        reader = asyncio.ensure_future(store.read(_rec(2)))
        await assert_waiting_off_the_loop(reader)
        assert not write.done()
        gate.open()
        await asyncio.wait_for(write, 10)
        assert (await asyncio.wait_for(reader, 10))[0] == payload
    assert flock_free(segment)
    await store.aclose()
    other = LocalStore(tmp_path)
    assert (await other.read(_rec(2)))[0] == payload
    await other.aclose()


async def test_a_kernel_sync_that_fails_raises_and_frees_the_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel reporting an I/O error for the sync: the append raises a
    ``StorageError`` naming the key (not transient), whose cause is the
    ``OSError``; the locks are let go of, and the store appends again."""
    store, segment = await _store_with_one_record(tmp_path)
    real = KernelSyncs._finish
    failed: list[int] = []

    def failing(syncs: KernelSyncs, op: Any, res: int) -> None:
        failed.append(res)
        real(syncs, op, -errno.EIO if len(failed) == 1 else res)

    monkeypatch.setattr(KernelSyncs, "_finish", failing)
    async with call_in_flight():
        with pytest.raises(StorageError, match=r"00000000000000000002\.rec") as caught:
            await store.create(_rec(2), b"two")
    assert failed == [0]  # the real sync succeeded; its report was replaced
    assert not caught.value.transient
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno == errno.EIO
    assert not store._segs.segment(str(segment)).lock.locked()
    assert flock_free(segment)
    async with call_in_flight():
        await store.create(_rec(3), b"three")
    await store.create(_rec(4), b"four")
    assert len(failed) == 2  # the third went to the kernel too
    got = await store.read_many([_rec(1), _rec(3), _rec(4)])
    assert got == [b"one", b"three", b"four"]
    await store.aclose()


async def test_a_kernel_synced_append_cancelled_during_its_sync_still_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelling the task that awaits the sync does not leave the segment locked
    while the loop holds back its reaping: a thread waits for the sync's end in
    the kernel, indexes the frame and lets go of the locks."""
    gate = _GatedReaper(monkeypatch)
    store, segment = await _store_with_one_record(tmp_path)
    lock = store._segs.segment(str(segment)).lock
    async with call_in_flight():
        write = asyncio.ensure_future(store.create(_rec(2), b"two"))
        await gate.until_held()
        assert lock.locked()
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        await until(
            lambda: not lock.locked(), "the segment's lock let go of"
        )  # the gate is still shut
    assert flock_free(segment)
    assert _kernel_sync.in_flight() == 0
    assert (await store.read(_rec(2)))[0] == b"two"
    with pytest.raises(ObjectExistsError):
        await store.create(_rec(2), b"again")
    gate.open()
    await store.aclose()


async def test_an_append_cancelled_before_its_sync_reached_the_kernel_still_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Syncs wait in a queue for the loop's next ``io_submit``; an append cancelled
    while its sync waits there (a loop that stops before submitting, modelled by
    holding the queue back) is taken off the queue and synced by a thread of its
    own, which indexes the frame and lets go of the locks."""
    monkeypatch.setattr(KernelSyncs, "_flush", lambda _: None)
    store, segment = await _store_with_one_record(tmp_path)
    lock = store._segs.segment(str(segment)).lock
    async with call_in_flight():
        write = asyncio.ensure_future(store.create(_rec(2), b"two"))
        await until(_kernel_sync.in_flight, "a sync queued", pause=0.001)
        syncs = _kernel_sync.for_running_loop()
        assert syncs is not None
        assert len(syncs._queue) == 1
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert syncs._queue == []
        await until(lambda: not lock.locked(), "the segment's lock let go of")
    assert _kernel_sync.in_flight() == 0
    assert flock_free(segment)
    assert (await store.read(_rec(2)))[0] == b"two"
    await store.aclose()
    fresh = LocalStore(tmp_path)
    assert (await fresh.read(_rec(2)))[0] == b"two"
    await fresh.aclose()


def test_an_append_left_pending_when_its_loop_ends_lands_for_the_next_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``asyncio.run`` returning while a kernel-synced append is still pending (its
    task is cancelled, its loop closed before any reaping): the sync's end is
    still run, so the next loop appends to the same segment and reads the
    record back."""
    _GatedReaper(monkeypatch)  # this loop never reaps anything
    store = LocalStore(tmp_path)
    left: list[asyncio.Future[str]] = []

    async def first() -> None:
        await store.create(_rec(1), b"one")
        async with call_in_flight():
            # Never awaited: left for asyncio.run to cancel as it ends.
            left.append(asyncio.ensure_future(store.create(_rec(2), b"two")))
            # Once submitted, it is left to the loop's end.
            await until(
                _kernel_sync.in_flight, "the append reached the kernel", pause=0.001
            )

    asyncio.run(first())
    assert left[0].cancelled()

    async def second() -> list[bytes | None]:
        await asyncio.wait_for(store.create(_rec(3), b"three"), 10)
        got = await store.read_many([_rec(1), _rec(2), _rec(3)])
        await store.aclose()
        return got

    monkeypatch.undo()
    assert asyncio.run(second()) == [b"one", b"two", b"three"]
    assert _kernel_sync.in_flight() == 0


async def test_a_sync_the_kernel_refuses_runs_in_a_thread_and_later_ones_in_workers(
    tmp_path: Path, hops: list[str]
) -> None:
    """The kernel refusing a sync (a pipe has no AIO sync: ``EINVAL``): that sync
    runs in a thread with the same completion, which gets the thread's own error;
    the loop's later syncs go to the worker threads."""
    syncs = _kernel_sync.for_running_loop()
    assert syncs is not None, "this kernel refuses AIO contexts"
    errors: list[OSError | None] = []

    def complete(error: OSError | None) -> str:
        errors.append(error)
        return "completed"

    read_end, write_end = os.pipe()
    try:
        op = syncs.submit(read_end, complete)
        assert op is not None
        assert await asyncio.wait_for(syncs.wait(op), 10) == "completed"
        assert syncs.refused
        assert syncs.submit(read_end, complete) is None
    finally:
        os.close(read_end)
        os.close(write_end)
    assert len(errors) == 1
    assert isinstance(errors[0], OSError)
    assert errors[0].errno == errno.EINVAL
    assert _kernel_sync.in_flight() == 0
    store = LocalStore(tmp_path)
    await store.create(_rec(1), b"one")
    async with call_in_flight():
        hops.clear()
        await store.create(_rec(2), b"two")
    assert hops == ["_finish_append"]
    assert (await store.read(_rec(2)))[0] == b"two"
    await store.aclose()


async def test_a_sync_that_gets_no_thread_runs_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fails when the thread cannot be started: the sync was dropped from the
    loop's syncs before, so it never ran, its append never ended, and its
    segment's locks stayed held."""
    syncs = _kernel_sync.for_running_loop()
    assert syncs is not None, "this kernel refuses AIO contexts"

    def no_thread(*_: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(_kernel_sync, "_daemon", no_thread)
    errors: list[OSError | None] = []
    read_end, write_end = os.pipe()
    try:
        op = syncs.submit(read_end, errors.append)  # refused by the kernel: EINVAL
        assert op is not None
        await asyncio.wait_for(syncs.wait(op), 5)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert len(errors) == 1
    assert isinstance(errors[0], OSError)
    assert errors[0].errno == errno.EINVAL  # the pipe's fdatasync, run here
    assert _kernel_sync.in_flight() == 0


def _ring_size(syncs: KernelSyncs) -> int:
    """The events the kernel's ring holds: ``nr`` in the ring's header, which the
    context's id addresses (``struct aio_ring``: id, nr, head, tail, ...)."""
    return ctypes.c_uint.from_address(syncs._ctx.value + 4).value


async def test_syncs_past_a_full_ring_wait_for_room_and_all_land(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """More syncs at once than the context's ring holds (the smallest ring the
    kernel makes for this machine): those it refuses wait in the queue, ahead of
    newer ones, and go to the kernel as ends are reaped; none goes to a thread,
    and every append lands."""
    monkeypatch.setattr(_kernel_sync, "_RING", 1)
    # The second round's first append comes after the first round's last: on a
    # busy machine more than the 5 ms that make it look alone, and then it ran
    # on the loop instead of in the kernel (one submission short, in one CI run).
    monkeypatch.setattr(local_module, "_CONCURRENT_WINDOW", 60.0)
    syncs = _kernel_sync.for_running_loop()
    assert syncs is not None, "this kernel refuses AIO contexts"
    store = LocalStore(tmp_path)
    threads = [f"t{i}" for i in range(_ring_size(syncs) + 64)]
    # Each segment's first append syncs its directory too, in a worker.
    await asyncio.gather(*(store.create(_rec(1, t), b"first") for t in threads))
    hops.clear()
    before = _kernel_sync.submitted()
    await asyncio.gather(*(store.create(_rec(2, t), t.encode()) for t in threads))
    assert syncs.deferred > 0, "the ring never filled"
    assert _kernel_sync.submitted() - before == len(threads)
    assert hops == []
    assert _kernel_sync.in_flight() == 0
    got = await store.read_many([_rec(2, t) for t in threads])
    assert got == [t.encode() for t in threads]
    await store.aclose()


def _aio_rings() -> int:
    """How many AIO contexts this process has mapped (one ring each)."""
    with open("/proc/self/maps") as maps:
        return sum("[aio]" in line for line in maps)


def test_a_loops_context_is_freed_with_the_loop(tmp_path: Path) -> None:
    """Each loop that hands syncs to the kernel makes one context, and it goes with
    the loop: a process running loop after loop (``asyncio.run`` per call) does
    not pile them up against the machine's ``fs.aio-max-nr``."""

    async def appends(root: Path) -> bool:
        store = LocalStore(root)
        for version in (1, 2):
            await asyncio.gather(
                *(store.create(_rec(version, f"t{i}"), b"x") for i in range(4))
            )
        made = _kernel_sync.for_running_loop() is not None
        await store.aclose()
        return made

    gc.collect()
    before = _aio_rings()
    for round_ in range(3):
        assert asyncio.run(appends(tmp_path / str(round_)))
        gc.collect()
        assert _aio_rings() == before


def test_a_loop_that_cannot_watch_an_eventfd_gets_no_kernel_syncs() -> None:
    """A loop without ``add_reader`` (as some event loops are): no context, the
    caller syncs in workers; nothing is left open."""

    class NoReaders(asyncio.SelectorEventLoop):
        def add_reader(self, *_: Any) -> None:  # type: ignore[override]
            raise NotImplementedError

    async def ask() -> KernelSyncs | None:
        return _kernel_sync.for_running_loop()

    gc.collect()  # earlier tests' loops close their descriptors now, not below
    fds = set(os.listdir("/proc/self/fd"))
    rings = _aio_rings()
    loop = NoReaders()
    try:
        assert loop.run_until_complete(ask()) is None
    finally:
        loop.close()
    assert set(os.listdir("/proc/self/fd")) <= fds
    assert _aio_rings() == rings


@pytest.mark.parametrize("why", ["refused", "turned off"])
async def test_without_kernel_syncs_concurrent_syncs_go_to_workers(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    """A kernel or sandbox that gives no AIO context (modelled by the module's
    verdict on it), or a store made with ``kernel_syncs=False``: concurrent
    appends' syncs run in worker threads, as before."""
    if why == "refused":
        monkeypatch.setattr(_kernel_sync, "_usable", False)
    store = LocalStore(tmp_path, kernel_syncs=why != "turned off")
    await store.create(_rec(1), b"one")
    before = _kernel_sync.submitted()
    async with call_in_flight():
        hops.clear()
        await store.create(_rec(2), b"two")
    assert _kernel_sync.submitted() == before
    assert hops == ["_finish_append"]
    assert (await store.read(_rec(2)))[0] == b"two"
    await store.aclose()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_makes_its_own_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel gives a child none of its parent's AIO contexts: after a fork the
    child makes its own, and its concurrent appends are kernel-synced."""
    # A window no stall of a busy machine outlasts: appends to other threads are
    # concurrent however slowly they come.
    monkeypatch.setattr(local_module, "_CONCURRENT_WINDOW", 60.0)

    async def appends(root: Path) -> int:
        store = LocalStore(root)
        before = _kernel_sync.submitted()
        for version in range(1, 4):
            await asyncio.gather(
                *(store.create(_rec(version, f"t{i}"), b"x") for i in range(4))
            )
        got = await store.read_many([_rec(3, f"t{i}") for i in range(4)])
        await store.aclose()
        assert got == [b"x"] * 4
        return _kernel_sync.submitted() - before

    assert asyncio.run(appends(tmp_path / "parent")) > 0
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if asyncio.run(appends(tmp_path / "child")) > 0 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
