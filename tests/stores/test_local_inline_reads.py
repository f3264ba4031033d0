"""Reads served on the event loop only when they cannot wait (``stores._nowait``).

A cached read of the local store runs on the loop (no worker-thread hop); a read
whose bytes are not in the page cache, or whose segment is locked by a writer, runs
in a worker thread instead, so the loop never waits on a disk or a lock. Every
path returns the same bytes. Bytes are evicted from the page cache with
``posix_fadvise(DONTNEED)`` on synced files, which ext4 honours (the tests' scratch
directory is on it; on a file system that keeps them, the eviction tests fail
loudly rather than pass without checking anything).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import mmap
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.layout import HINT_NAME
from stores import _nowait, segments
from stores.local import LocalStore
from tests.stores._hops import (
    assert_waiting_off_the_loop,
    count_hops,
    held_elsewhere,
)

if TYPE_CHECKING:
    from pathlib import Path

RECORD = "t/log/00000000000000000001.rec"
PLAIN = "t/LAST_CHECKPOINT"
# Over ext4's inline-data limit: its bytes live in pages, not in the inode.
PLAIN_DATA = b"p" * 5000


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the store functions handed to a worker thread."""
    return count_hops(monkeypatch)


_libc = ctypes.CDLL(None, use_errno=True)
_PAGE = mmap.PAGESIZE


def _cached_pages(fd: int, size: int) -> int:
    """How many of the file's pages are in the page cache (``mincore``)."""
    # A private writable mapping, never touched: mapping reads nothing, and
    # ctypes needs a writable buffer to take its address.
    mapped = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE)
    try:
        window = (ctypes.c_char * size).from_buffer(mapped)
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vec = (ctypes.c_ubyte * pages)()
            address = ctypes.c_void_p(ctypes.addressof(window))
            if _libc.mincore(address, ctypes.c_size_t(size), vec):
                raise OSError(ctypes.get_errno(), "mincore failed")
            return sum(v & 1 for v in vec)
        finally:
            del window
    finally:
        mapped.close()


def _read_ahead(path: Path) -> int:
    """The read-ahead, in bytes, of the block device holding ``path``."""
    dev = os.stat(path).st_dev
    base = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    # A partition's queue is its disk's.
    for queue in (f"{base}/queue", f"{base}/../queue"):
        with (
            contextlib.suppress(FileNotFoundError),
            open(f"{queue}/read_ahead_kb") as fh,
        ):
            return int(fh.read()) * 1024
    return 8 << 20  # unknown (a device-mapper stack, say): a generous guess


def _evict(root: Path) -> None:
    """Drop every file under ``root`` from the page cache, and check it.

    Pages just written can sit in another CPU's batch of pages on their way to
    the LRU lists, where ``DONTNEED`` does not see them: it is asked again until
    ``mincore`` finds none left (a no-wait read cannot check: finding the bytes
    missing, it starts reading them ahead).
    """
    files = [os.path.join(d, n) for d, _, names in os.walk(root) for n in names]
    deadline = time.monotonic() + 10
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            os.fsync(fd)
            while True:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                if not size or not _cached_pages(fd, size):
                    break
                assert time.monotonic() < deadline, f"{path} stays in the page cache"
                time.sleep(0.01)
        finally:
            os.close(fd)


async def _filled(root: Path, **options: Any) -> LocalStore:
    store = LocalStore(root, **options)
    await store.create(RECORD, b"record one" * 50)
    await store.create(PLAIN, PLAIN_DATA)
    await store.create("t/log/00000000000000000002.rec", b"record two")
    await store.aclose()  # its reserve trimmed, its descriptors closed
    return LocalStore(root, **options)


async def test_cached_reads_take_no_thread_hop(tmp_path: Path, hops: list[str]) -> None:
    store = await _filled(tmp_path)
    hops.clear()
    assert (await store.read(RECORD))[0] == b"record one" * 50
    assert (await store.read(PLAIN))[0] == PLAIN_DATA
    assert await store.read_many([RECORD, PLAIN, "t/none"]) == [
        b"record one" * 50,
        PLAIN_DATA,
        None,
    ]
    assert await store.exist_many([RECORD, PLAIN, "t/none"]) == [True, True, False]
    keys, data = await store.list_and_read("t/log", limit=5)
    assert len(keys) == 2
    assert data == [b"record one" * 50, b"record two"]
    assert await store.list("t") == [PLAIN, RECORD, "t/log/00000000000000000002.rec"]
    assert await store.children("") == ["t"]
    assert await store.descendants("", (None, "log")) == [("t", "log")]
    assert hops == []


async def test_uncached_bytes_are_read_by_a_worker(
    tmp_path: Path, hops: list[str]
) -> None:
    """Objects four times the device's read-ahead, evicted: the read-ahead a
    no-wait read starts cannot bring them in whole while it asks, however fast
    the disk."""
    big = os.urandom(4 * _read_ahead(tmp_path) + (1 << 20))
    store = LocalStore(tmp_path)
    await store.create(RECORD, big)
    await store.create(PLAIN, big[::-1])
    await store.aclose()
    store = LocalStore(tmp_path)
    _evict(tmp_path)
    hops.clear()
    assert (await store.read(RECORD))[0] == big
    assert hops == ["_read"]
    _evict(tmp_path)
    assert (await store.read(PLAIN))[0] == big[::-1]
    _evict(tmp_path)
    _, data = await store.list_and_read("t/log", limit=5)
    assert data == [big]
    assert hops == ["_read", "_read", "_list_and_read"]
    # Read once, the bytes are cached: the next read stays on the loop.
    assert (await store.read(RECORD))[0] == big
    assert hops == ["_read", "_read", "_list_and_read"]


async def test_a_cold_hint_has_its_checkpoint_and_segment_read_ahead(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load whose ``LAST_CHECKPOINT`` had left the page cache asks the kernel for
    the checkpoint it names and that version's record segment before reading
    them (``POSIX_FADV_WILLNEED``); a load whose hint was cached asks nothing."""
    key = ThreadKey("agent", "s", "u")
    journal = Journal.open(tmp_path)
    async with journal.writer(key) as writer:
        for i in range(5):
            await writer.append([MessageAppended(Msg("user", f"m{i}"))])
        version = await writer.checkpoint()
    await journal.aclose()
    asked: list[str] = []
    real = os.posix_fadvise

    def recording(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_WILLNEED:
            asked.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recording)
    thread = next(p.parent for p in tmp_path.rglob(HINT_NAME))
    _evict(tmp_path)
    hops.clear()
    fresh = Journal.open(tmp_path)
    state = await fresh.load(key)
    assert [m.content for m in state.context] == [f"m{i}" for i in range(5)]
    assert "_read_cold_hint" in hops
    assert sorted(asked) == sorted(
        [
            str(thread / "checkpoints" / f"{version:020d}.ckpt"),
            str(thread / "log" / segments.segment_of(f"{version:020d}.rec")),
        ]
    )
    asked.clear()
    hops.clear()
    assert len((await fresh.load(key)).context) == 5
    assert (asked, hops) == ([], [])
    await fresh.aclose()


async def test_a_segment_locked_by_a_writer_is_waited_for_off_the_loop(
    tmp_path: Path, hops: list[str]
) -> None:
    """A writer (another open file, as another process would hold it) has the
    segment's exclusive flock: the read waits for it in a worker while the loop
    runs on, and returns the record once the lock is let go."""
    store = await _filled(tmp_path)
    segment = next((tmp_path / "t" / "log").glob(".seg-*"))
    # A frame appended behind the index's back makes the reader rescan, which
    # takes the shared lock.
    fd = os.open(segment, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with open(segment, "ab") as fh:
            fh.write(segments.frame(segments._PUT, "00000000000000000003.rec", b"3"))
        hops.clear()
        read = asyncio.ensure_future(store.read("t/log/00000000000000000003.rec"))
        await assert_waiting_off_the_loop(read)
        assert hops == ["_read"]
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert (await asyncio.wait_for(read, 10))[0] == b"3"
    finally:
        os.close(fd)


async def test_a_segment_busy_in_this_process_is_read_by_a_worker(
    tmp_path: Path, hops: list[str]
) -> None:
    """The segment's thread lock, held by a writer's worker thread of this process,
    is never waited for on the loop."""
    store = await _filled(tmp_path)
    segment = next((tmp_path / "t" / "log").glob(".seg-*"))
    lock = store._segs.segment(str(segment)).lock
    with held_elsewhere(lock):
        hops.clear()
        read = asyncio.ensure_future(store.read(RECORD))
        await asyncio.sleep(0.02)
        assert not read.done()
        assert hops == ["_read"]
    assert (await asyncio.wait_for(read, 10))[0] == b"record one" * 50


async def test_inline_reads_off_hops_every_time(
    tmp_path: Path, hops: list[str]
) -> None:
    store = await _filled(tmp_path, inline_reads=False)
    hops.clear()
    assert (await store.read(RECORD))[0] == b"record one" * 50
    assert await store.exist_many([PLAIN]) == [True]
    assert hops == ["_read", "_exist_many"]


async def test_a_file_system_without_nowait_reads_stops_trying(
    tmp_path: Path, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await _filled(tmp_path)
    monkeypatch.setattr(_nowait, "_RWF_NOWAIT", None)
    hops.clear()
    assert (await store.read(RECORD))[0] == b"record one" * 50
    assert store.inline_reads is False
    assert (await store.read(PLAIN))[0] == PLAIN_DATA
    assert hops == ["_read", "_read"]


def test_no_wait_mode_is_per_thread() -> None:
    seen: list[bool] = []
    with _nowait.attempt():
        worker = threading.Thread(target=lambda: seen.append(_nowait.active()))
        worker.start()
        worker.join()
        seen.append(_nowait.active())
    seen.append(_nowait.active())
    assert seen == [False, True, False]
