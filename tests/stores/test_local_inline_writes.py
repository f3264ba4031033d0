"""Writes run on the event loop while they are quick and nothing else waits on I/O.

A single write of the local store (``create``, ``create_derived``, ``put_hint``,
``replace_unsynced``) runs on the loop when no call of this process is in a worker
thread and the store's writes have averaged under ``INLINE_WRITE_BUDGET``; its
``fdatasync`` then runs there too. Otherwise a durable append (a record or blob
``create``) is written on the loop and only its ``fdatasync`` runs elsewhere: in
the kernel where it can (``tests/stores/test_local_kernel_syncs.py``), else in a
worker thread (the tests here that turn ``kernel_syncs`` off), which lets go of
the segment's locks after it: no reader sees the frame before it is durable. A
lock held elsewhere or a torn tail to repair sends the whole write to a worker
thread before anything is written, so the loop never waits on another writer and
nothing is written twice. A batch of derived blobs
(``create_many_derived``) is written on the loop under the same rules, in writes
of up to ``INLINE_FRAME_MAX`` bytes, the rest going to a worker in one call once
one of them cannot.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import threading
import time
from typing import TYPE_CHECKING

import pytest

import stores.local as local_module
from journal.errors import ObjectExistsError, StorageError
from stores import _nowait
from stores._offload import run_blocking
from stores.local import LocalStore
from tests.stores._hops import (
    assert_waiting_off_the_loop,
    call_in_flight,
    count_hops,
    flock_free,
    held_elsewhere,
    record_syncs,
    until,
)
from tests.stores._segment_child import PUT, encode_frame, parse_segment

if TYPE_CHECKING:
    from pathlib import Path


def _rec(version: int) -> str:
    return f"t/log/{version:020d}.rec"


class _Ticks:
    """Counts the event loop's turns (other tasks' chances to run) until stopped."""

    def __init__(self) -> None:
        self.count = 0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._task.cancel()


@pytest.fixture(autouse=True)
def steady_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget no sync of a busy machine outlasts: the tests check the rules, and
    the budget's own test sets its own."""
    monkeypatch.setattr(local_module, "INLINE_WRITE_BUDGET", 60.0)


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the store functions run in a worker thread."""
    return count_hops(monkeypatch)


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread of each ``fdatasync``, by name."""
    return record_syncs(monkeypatch)


async def test_quiet_writes_run_on_the_loop_and_still_sync(
    tmp_path: Path, hops: list[str], syncs: list[str]
) -> None:
    store = LocalStore(tmp_path)
    loop_thread = threading.current_thread().name
    await store.create(_rec(1), b"one")
    await store.create(_rec(2), b"two")
    assert await store.create_derived("t/blobs/" + "a" * 64, b"blob") is True
    assert await store.create_derived("t/blobs/" + "a" * 64, b"blob") is False
    await store.put_hint("t/LAST_CHECKPOINT", b"2")
    await store.create("t/LEASE", b"lease 1")
    _, etag = await store.read("t/LEASE")
    await store.replace_unsynced("t/LEASE", b"lease 2", if_match=etag)
    assert hops == []
    # Each durable append synced its segment, here on the loop's thread.
    assert syncs.count(loop_thread) >= 2
    assert set(syncs) == {loop_thread}
    assert [(await store.read(k))[0] for k in (_rec(1), _rec(2))] == [b"one", b"two"]
    assert (await store.read("t/LEASE"))[0] == b"lease 2"
    with pytest.raises(ObjectExistsError):
        await store.create(_rec(2), b"again")
    await store.aclose()


async def test_a_call_in_flight_sends_syncs_to_a_worker(
    tmp_path: Path, hops: list[str], syncs: list[str]
) -> None:
    """Concurrent writers overlap their syncs in worker threads; the frames are
    written on the loop."""
    store = LocalStore(tmp_path, kernel_syncs=False)
    loop_thread = threading.current_thread().name
    gate = threading.Event()
    busy = asyncio.ensure_future(run_blocking(gate.wait, 10))
    try:
        await asyncio.sleep(0.01)
        await store.create(_rec(1), b"one")
        assert hops == ["_finish_append"]
        assert len(syncs) >= 1
        assert loop_thread not in syncs
    finally:
        gate.set()
        await busy
    await store.create(_rec(2), b"two")
    assert hops == ["_finish_append"]
    assert syncs[-1] == loop_thread
    assert [(await store.read(k))[0] for k in (_rec(1), _rec(2))] == [b"one", b"two"]
    await store.aclose()


async def test_appends_to_several_threads_at_once_go_to_workers(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends to two threads' logs interleaved: their syncs overlap in workers;
    one thread writing alone gets the loop back."""
    # A window no stall of a busy machine outlasts: the test checks the rule.
    monkeypatch.setattr(local_module, "_CONCURRENT_WINDOW", 60.0)
    store = LocalStore(tmp_path, kernel_syncs=False)
    for version in range(1, 6):
        await store.create(f"a/log/{version:020d}.rec", b"a")
        await store.create(f"b/log/{version:020d}.rec", b"b")
    assert hops == ["_finish_append"] * 9  # all but the very first
    hops.clear()
    for version in range(6, 12):
        await store.create(f"a/log/{version:020d}.rec", b"a")
    # Only the first of them follows one to "b".
    assert hops == ["_finish_append"]
    got = await store.read_many(
        [f"{t}/log/{v:020d}.rec" for t in "ab" for v in range(1, 6)]
    )
    assert got == [b"a"] * 5 + [b"b"] * 5
    await store.aclose()


class _GatedSync:
    """``os.fdatasync`` that, in a worker thread, waits until :meth:`open`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self._release = threading.Event(), threading.Event()
        self._loop_thread = threading.current_thread()
        self._real = os.fdatasync
        monkeypatch.setattr(os, "fdatasync", self)

    def __call__(self, fd: int) -> None:
        if threading.current_thread() is not self._loop_thread:
            self.entered.set()
            assert self._release.wait(10)
        self._real(fd)

    async def until_entered(self) -> None:
        await until(self.entered.is_set, "the sync started in a worker")

    def open(self) -> None:
        self._release.set()


async def test_a_concurrent_append_keeps_its_locks_until_its_sync_returns(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frame is written on the loop, the sync runs in a worker, and until it
    returns the segment stays locked: no reader, of this process or another,
    indexes a frame that is not durable yet."""
    store = LocalStore(tmp_path, kernel_syncs=False)
    await store.create(_rec(1), b"one")
    segment = next((tmp_path / "t" / "log").glob(".seg-*"))
    sync = _GatedSync(monkeypatch)
    payload = b"two: written on the loop, synced in a worker"
    async with call_in_flight():
        hops.clear()
        write = asyncio.ensure_future(store.create(_rec(2), payload))
        await sync.until_entered()
        assert payload in segment.read_bytes()  # written, in the page cache
        assert not flock_free(segment)
        reader = asyncio.ensure_future(store.read(_rec(2)))
        await assert_waiting_off_the_loop(reader)
        assert not write.done()
        sync.open()
        await asyncio.wait_for(write, 10)
        assert (await asyncio.wait_for(reader, 10))[0] == payload
    assert hops[0] == "_finish_append"
    assert flock_free(segment)
    await store.aclose()
    other = LocalStore(tmp_path)
    assert (await other.read(_rec(2)))[0] == payload
    await other.aclose()


async def test_a_concurrent_append_whose_sync_fails_raises_and_frees_the_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fdatasync`` failing in the worker: the append raises a ``StorageError``
    naming the key (not transient: an I/O error), the locks are let go of, and
    the store appends again."""
    store = LocalStore(tmp_path, kernel_syncs=False)
    await store.create(_rec(1), b"one")
    segment = next((tmp_path / "t" / "log").glob(".seg-*"))
    loop_thread = threading.current_thread()
    real = os.fdatasync

    def failing(fd: int) -> None:
        if threading.current_thread() is not loop_thread:
            raise OSError(errno.EIO, "injected I/O error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", failing)
    async with call_in_flight():
        with pytest.raises(StorageError, match=r"00000000000000000002\.rec") as caught:
            await store.create(_rec(2), b"two")
    assert not caught.value.transient
    assert isinstance(caught.value.__cause__, OSError)
    assert not store._segs.segment(str(segment)).lock.locked()
    assert flock_free(segment)
    monkeypatch.setattr(os, "fdatasync", real)
    async with call_in_flight():
        await store.create(_rec(3), b"three")
    await store.create(_rec(4), b"four")
    got = await store.read_many([_rec(1), _rec(3), _rec(4)])
    assert got == [b"one", b"three", b"four"]
    await store.aclose()


async def test_a_concurrent_append_cancelled_during_its_sync_still_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelling the task that awaits the sync does not stop it: the worker
    syncs the frame, indexes it and lets go of the locks (the append's outcome
    is unknown to the cancelled caller, as after any cancelled write)."""
    store = LocalStore(tmp_path, kernel_syncs=False)
    await store.create(_rec(1), b"one")
    segment = next((tmp_path / "t" / "log").glob(".seg-*"))
    lock = store._segs.segment(str(segment)).lock
    sync = _GatedSync(monkeypatch)
    async with call_in_flight():
        write = asyncio.ensure_future(store.create(_rec(2), b"two"))
        await sync.until_entered()
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert lock.locked()
        sync.open()
        await until(lambda: not lock.locked(), "the segment's lock let go of")
    assert not lock.locked()
    assert flock_free(segment)
    assert (await store.read(_rec(2)))[0] == b"two"
    with pytest.raises(ObjectExistsError):
        await store.create(_rec(2), b"again")
    await store.aclose()


async def test_appends_without_fsync_stay_on_the_loop_for_several_threads(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without fsync there are no syncs to overlap: appends to several threads'
    logs at once are written on the loop, as one thread's are."""
    monkeypatch.setattr(local_module, "_CONCURRENT_WINDOW", 60.0)
    store = LocalStore(tmp_path, fsync=False)
    for version in range(1, 6):
        await store.create(f"a/log/{version:020d}.rec", b"a")
        await store.create(f"b/log/{version:020d}.rec", b"b")
    assert hops == []
    got = await store.read_many(
        [f"{t}/log/{v:020d}.rec" for t in "ab" for v in range(1, 6)]
    )
    assert got == [b"a"] * 5 + [b"b"] * 5
    await store.aclose()


async def test_an_append_on_the_loop_lets_other_tasks_run(tmp_path: Path) -> None:
    """Appends that never leave the loop still yield to it, so that timers (a
    writer's lease renewal) and other tasks run between them."""
    store = LocalStore(tmp_path)
    ticks = _Ticks()
    await asyncio.sleep(0)
    start = ticks.count
    for version in range(1, 21):
        await store.create(_rec(version), b"x")
    assert ticks.count - start >= 19
    ticks.stop()
    await store.aclose()


async def test_a_segment_flocked_elsewhere_is_waited_for_off_the_loop(
    tmp_path: Path, hops: list[str]
) -> None:
    """Another writer (another open file, as another process holds it) has the
    segment's flock: the append waits in a worker while the loop runs on, and
    lands once, after the lock is let go."""
    store = LocalStore(tmp_path)
    await store.create(_rec(1), b"one")
    segment = next((tmp_path / "t" / "log").glob(".seg-*"))
    fd = os.open(segment, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        hops.clear()
        write = asyncio.ensure_future(store.create(_rec(2), b"two"))
        await assert_waiting_off_the_loop(write)
        assert hops == ["_publish"]
        fcntl.flock(fd, fcntl.LOCK_UN)
        await asyncio.wait_for(write, 10)
    finally:
        os.close(fd)
    await store.aclose()
    frames, tail = parse_segment(segment)
    assert [f.name for f in frames if f.name.endswith(".rec")] == [
        f"{v:020d}.rec" for v in (1, 2)
    ]
    assert tail == 0


async def test_a_segment_busy_in_this_process_is_written_by_a_worker(
    tmp_path: Path, hops: list[str]
) -> None:
    store = LocalStore(tmp_path)
    await store.create(_rec(1), b"one")
    segment = next((tmp_path / "t" / "log").glob(".seg-*"))
    lock = store._segs.segment(str(segment)).lock
    with held_elsewhere(lock):
        hops.clear()
        write = asyncio.ensure_future(store.create(_rec(2), b"two"))
        await asyncio.sleep(0.02)
        assert not write.done()
        assert hops == ["_publish"]
    await asyncio.wait_for(write, 10)
    assert (await store.read(_rec(2)))[0] == b"two"
    await store.aclose()


async def test_a_torn_tail_is_repaired_by_a_worker(
    tmp_path: Path, hops: list[str]
) -> None:
    """A writer killed inside its frame left a torn tail: the next append goes to
    a worker thread, which cuts it (keeping aside whatever may have been
    acknowledged) and appends where the valid frames end."""
    store = LocalStore(tmp_path)
    await store.create(_rec(1), b"one")
    await store.aclose()
    segment = next((tmp_path / "t" / "log").glob(".seg-*"))
    frames, _ = parse_segment(segment)
    end = frames[-1].end
    torn = encode_frame(PUT, f"{2:020d}.rec", b"2" * 3000)[:-1500]
    fd = os.open(segment, os.O_RDWR)
    try:
        os.pwrite(fd, torn, end)
    finally:
        os.close(fd)
    store = LocalStore(tmp_path)
    assert await store.read_many([_rec(2)]) == [None]  # indexes the torn tail
    hops.clear()
    await store.create(_rec(2), b"two")
    assert hops == ["_publish"]
    assert (await store.read(_rec(2)))[0] == b"two"
    await store.aclose()
    frames, tail = parse_segment(segment)
    assert [f.name for f in frames][-1] == f"{2:020d}.rec"
    assert tail == 0


async def test_slow_writes_go_to_workers_until_the_disk_is_quick_again(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = 0.05  # well above what a sync takes here, busy or not
    monkeypatch.setattr(local_module, "INLINE_WRITE_BUDGET", budget)
    store = LocalStore(tmp_path, kernel_syncs=False)
    await store.create(_rec(1), b"one")
    assert hops == []
    real = os.fdatasync
    slow = budget * 4

    def slow_sync(fd: int) -> None:
        time.sleep(slow)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_sync)
    version = 2
    while not hops:
        assert version < 20, "slow writes kept running on the loop"
        await store.create(_rec(version), b"x")
        version += 1
    # The average rose past the budget within a few writes; it keeps being kept
    # from the workers' writes.
    assert version <= 6
    slow_count = len(hops)
    for _ in range(3):
        await store.create(_rec(version), b"x")
        version += 1
    assert len(hops) == slow_count + 3
    monkeypatch.setattr(os, "fdatasync", real)
    start = len(hops)
    for _ in range(60):
        await store.create(_rec(version), b"x")
        version += 1
    back_inline = 60 - (len(hops) - start)
    assert back_inline > 30, "quick writes did not come back to the loop"
    got = await store.read_many([_rec(v) for v in range(2, version)])
    assert got == [b"x"] * (version - 2)
    await store.aclose()


async def test_inline_writes_off_hops_every_time(
    tmp_path: Path, hops: list[str]
) -> None:
    store = LocalStore(tmp_path, inline_writes=False)
    await store.create(_rec(1), b"one")
    await store.put_hint("t/LAST_CHECKPOINT", b"1")
    assert hops == ["_publish", "_put_hint"]
    await store.aclose()


async def test_without_nowait_reads_writes_stop_trying(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path)
    monkeypatch.setattr(_nowait, "_RWF_NOWAIT", None)
    await store.create(_rec(1), b"one")
    assert store.inline_writes is False
    await store.create(_rec(2), b"two")
    assert hops == ["_publish", "_publish"]
    assert (await store.read(_rec(2)))[0] == b"two"
    await store.aclose()


def _blob(i: int) -> str:
    return f"t/blobs/{i:064x}"


async def test_derived_blobs_are_written_on_the_loop_in_bounded_writes(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint's chunks (``create_many_derived``) go to the blob segment on
    the loop, as many frames a write as ``INLINE_FRAME_MAX`` bytes hold, other
    tasks (the writer's commits) running between the writes. In one worker call,
    the commits made meanwhile waited for all of it: past the span limit a
    checkpoint writes some 20 chunks, 600 KiB, and the turn that overlapped took the
    whole write's time; a write per chunk paid the segment's lock and checks for
    each (a checkpoint took 1.25x the time)."""
    store = LocalStore(tmp_path)
    writes: list[int] = []
    create_many = store._segs.create_many

    def counted(
        directory: str, items: list[tuple[str, bytes]], *, sync: bool = True
    ) -> list[bool]:
        writes.append(sum(len(data) for _, data in items))
        return create_many(directory, items, sync=sync)

    monkeypatch.setattr(store._segs, "create_many", counted)
    ticks = _Ticks()
    await asyncio.sleep(0)
    start = ticks.count
    # 480,000 bytes: two writes of six chunks (a third would not fit in the first).
    items = [(_blob(i), bytes([i]) * 40_000) for i in range(12)]
    assert await store.create_many_derived(items) == [True] * 12
    assert hops == []
    assert writes == [240_000, 240_000]
    assert all(size <= local_module.INLINE_FRAME_MAX for size in writes)
    assert ticks.count - start >= 2
    again = [*items[:2], (_blob(99), b"nine")]
    assert await store.create_many_derived(again) == [False, False, True]
    # A write takes one segment's frames: a lock found held then stops it before
    # any of it lands. Versions 1 and 2,000 lie in two segments of one directory.
    writes.clear()
    spread = [(_rec(1), b"a"), (_rec(2), b"b"), (_rec(2_000), b"c")]
    assert await store.create_many_derived(spread) == [True] * 3
    assert writes == [2, 1]
    ticks.stop()
    assert hops == []
    fresh = LocalStore(tmp_path)
    got = await fresh.read_many([k for k, _ in [*items, again[-1], *spread]])
    assert got == [d for _, d in items] + [b"nine"] + [d for _, d in spread]
    await store.aclose()


async def test_derived_blobs_go_to_a_worker_in_one_call_when_the_loop_cannot(
    tmp_path: Path, hops: list[str]
) -> None:
    """With a call of this process in a worker (writes there would wait), or
    without segments (plain files are synced before they are linked), the rest of
    the batch is one worker call, as before."""
    store = LocalStore(tmp_path)
    gate = threading.Event()
    busy = asyncio.ensure_future(run_blocking(gate.wait, 10))
    await asyncio.sleep(0.05)
    items = [(_blob(i), bytes([i]) * 100) for i in range(4)]
    created = asyncio.ensure_future(store.create_many_derived(items))
    await asyncio.sleep(0.05)
    gate.set()
    await busy
    assert await created == [True] * 4
    assert hops.count("_publish_many") == 1
    assert "_publish" not in hops
    # A frame too large to checksum and copy on the loop ends the inline run.
    hops.clear()
    large = b"L" * (local_module.INLINE_FRAME_MAX + 1)
    mixed = [(_blob(10), b"small"), (_blob(11), large), (_blob(12), b"after")]
    assert await store.create_many_derived(mixed) == [True] * 3
    assert hops == ["_publish_many"]
    assert await store.read_many([k for k, _ in mixed]) == [d for _, d in mixed]
    plain = LocalStore(tmp_path / "plain", segments=False)
    hops.clear()
    assert await plain.create_many_derived(items) == [True] * 4
    assert hops == ["_publish_many"]
    assert await plain.read_many([k for k, _ in items]) == [d for _, d in items]
    await store.aclose()
    await plain.aclose()


async def test_derived_blobs_wait_off_the_loop_for_a_segment_flocked_elsewhere(
    tmp_path: Path, hops: list[str]
) -> None:
    """Another process holding the blob segment's lock: the batch's rest goes to a
    worker in one call before anything of it is written, and each blob lands once."""
    store = LocalStore(tmp_path)
    first = [(_blob(1), b"one")]
    assert await store.create_many_derived(first) == [True]
    segment = next((tmp_path / "t" / "blobs").glob(".seg-*"))
    fd = os.open(segment, os.O_RDWR)
    rest = [(_blob(2), b"two"), (_blob(3), b"three")]
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        hops.clear()
        write = asyncio.ensure_future(store.create_many_derived(rest))
        await assert_waiting_off_the_loop(write)
        assert hops == ["_publish_many"]
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert await asyncio.wait_for(write, 10) == [True, True]
    finally:
        os.close(fd)
    await store.aclose()
    frames, tail = parse_segment(segment)
    assert sorted(f.name for f in frames if f.kind == PUT) == [
        k.rpartition("/")[2] for k, _ in [*first, *rest]
    ]
    assert tail == 0


async def test_tasks_appending_to_their_threads_at_once_go_to_workers(
    tmp_path: Path, hops: list[str]
) -> None:
    """Tasks appending at once, each to its own thread: their syncs overlap.

    After a pause longer than the window (an ``os.sync()`` before a batch, say),
    the first append runs on the loop; the others, made while it lets the loop
    go, are concurrent with it. They used to be taken for one thread writing
    alone: each task, coming back from its own append, found that append the last
    one, and every sync ran on the loop, one after another.
    """
    store = LocalStore(tmp_path, kernel_syncs=False)
    threads = "abcd"
    for t in threads:
        await store.create(f"{t}/log/{1:020d}.rec", b"first")
    hops.clear()
    await asyncio.sleep(0.05)  # past the window: nothing is concurrent yet

    async def append(t: str) -> None:
        for version in range(2, 12):
            await store.create(f"{t}/log/{version:020d}.rec", t.encode())

    await asyncio.gather(*(append(t) for t in threads))
    assert hops.count("_finish_append") >= 20  # of 40; none before
    got = await store.read_many(
        [f"{t}/log/{v:020d}.rec" for t in threads for v in range(2, 12)]
    )
    assert got == [t.encode() for t in threads for _ in range(10)]
    await store.aclose()
