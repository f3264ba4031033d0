"""An append whose write or sync failed leaves nothing a reader takes as committed.

After a failed ``fdatasync`` Linux may mark the pages it could not write clean: a
later sync then succeeds without them. So a frame whose sync failed must not stay
in the file looking whole, where the next scan would index it (a reader served an
append that raised; a retry finding its slot taken and adopting it unsynced) and
the next append would be acknowledged on top of bytes that may never reach the
disk. The segment code overwrites what a failed append wrote with zeros, while it
still holds the segment's locks; a retry then writes and syncs the frame afresh.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.errors import StorageError
from stores import segments as segments_module
from stores.local import LocalStore
from stores.segments import SegmentSet, segment_of

if TYPE_CHECKING:
    from pathlib import Path

NAME = f"{2:020d}.rec"


def _eio(*_: object) -> None:
    raise OSError(errno.EIO, "Input/output error")


def _seeded(root: Path) -> tuple[SegmentSet, str]:
    """A segment holding record 1, synced; its directory."""
    directory = str(root / "log")
    os.makedirs(directory)
    segs = SegmentSet(fsync=True)
    segs.create(directory, f"{1:020d}.rec", b"one", key="one")
    return segs, directory


def _frames_seen_fresh(directory: str) -> dict[str, bytes | None]:
    """What a new process finds in the segment: record 1 and record 2, or not."""
    fresh = SegmentSet(fsync=True)
    names = [f"{1:020d}.rec", NAME]
    found = fresh.read_many(directory, names)
    seg = fresh.segment(os.path.join(directory, segment_of(NAME) or ""))
    with seg.reading():
        assert seg.index.torn == 0, "the failed frame's bytes were left in the reserve"
    return dict(zip(names, found, strict=True))


def _check_undone(segs: SegmentSet, directory: str) -> None:
    # This process's readers, and a new process's, see record 1 only.
    assert segs.read(directory, NAME) is None
    assert _frames_seen_fresh(directory) == {f"{1:020d}.rec": b"one", NAME: None}
    # The retry writes and syncs the frame afresh.
    segs.create(directory, NAME, b"two", key="two")
    assert _frames_seen_fresh(directory) == {f"{1:020d}.rec": b"one", NAME: b"two"}


def test_a_failed_sync_leaves_no_frame(tmp_path: Path, monkeypatch):
    """Fails when the frame stays: the next scan indexes an append that raised."""
    segs, directory = _seeded(tmp_path)
    monkeypatch.setattr(os, "fdatasync", _eio)
    with pytest.raises(OSError, match="Input/output"):
        segs.create(directory, NAME, b"two", key="two")
    monkeypatch.undo()
    _check_undone(segs, directory)


def test_a_failed_kernel_sync_leaves_no_frame(tmp_path: Path):
    """The same when the sync ran elsewhere (``finish_synced`` with its error)."""
    segs, directory = _seeded(tmp_path)
    pending = segs.create_unsynced(directory, NAME, b"two", key="two")
    with pytest.raises(OSError, match="Input/output"):
        pending.finish_synced(OSError(errno.EIO, "Input/output error"))
    _check_undone(segs, directory)


def test_a_write_cut_short_leaves_no_frame(tmp_path: Path, monkeypatch):
    """A ``pwrite`` that wrote part of the frame, then failed (a full disk)."""
    segs, directory = _seeded(tmp_path)
    real = os.pwrite
    calls = []

    def half_then_enospc(fd: int, data: bytes, offset: int) -> int:
        # Half of the frame goes in, then the disk is full: the rest of the
        # frame's blocks could not be allocated. Zeros over what was written
        # need none.
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, bytes(data)[: len(data) // 2], offset)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", half_then_enospc)
    with pytest.raises(OSError, match="No space"):
        segs.create(directory, NAME, b"two" * 1000, key="two")
    monkeypatch.undo()
    assert calls[0] > 3000  # the frame's header and part of its data went in
    _check_undone(segs, directory)


def test_a_failed_directory_sync_leaves_no_frame(tmp_path: Path, monkeypatch):
    """A segment's first append syncs its directory: failing that, nothing stays.

    Fails when the frame is indexed and the locks let go of before that sync."""
    directory = str(tmp_path / "log")
    os.makedirs(directory)
    segs = SegmentSet(fsync=True)
    monkeypatch.setattr(segments_module, "fsync_dir", _eio)
    with pytest.raises(OSError, match="Input/output"):
        segs.create(directory, NAME, b"two", key="two")
    monkeypatch.undo()
    assert segs.read(directory, NAME) is None
    assert SegmentSet(fsync=True).read(directory, NAME) is None
    segs.create(directory, NAME, b"two", key="two")
    assert SegmentSet(fsync=True).read(directory, NAME) == b"two"


def test_a_failed_batch_sync_leaves_no_blob(tmp_path: Path, monkeypatch):
    """``create_many`` (chunks, payload blobs) appends frames under one sync."""
    directory = str(tmp_path / "blobs")
    os.makedirs(directory)
    segs = SegmentSet(fsync=True)
    digests = [f"{i:064x}" for i in (1, 2)]
    segs.create_many(directory, [(digests[0], b"first")])
    monkeypatch.setattr(os, "fdatasync", _eio)
    with pytest.raises(OSError, match="Input/output"):
        segs.create_many(directory, [(digests[1], b"second")])
    monkeypatch.undo()
    assert segs.read(directory, digests[1]) is None
    fresh = SegmentSet(fsync=True)
    assert fresh.read_many(directory, digests) == [b"first", None]
    assert segs.create_many(directory, [(digests[1], b"second")]) == [True]
    assert SegmentSet(fsync=True).read(directory, digests[1]) == b"second"


def test_a_batch_failing_its_directory_sync_leaves_no_blob(tmp_path: Path, monkeypatch):
    """Fails when ``create_many`` indexes its frames and lets go of the locks before
    the new segment's directory sync: another reader saw the blob before that sync,
    the blob stayed after it failed, and the retry answered "exists" without any
    directory sync (an acknowledged blob whose segment a power cut could lose)."""
    directory = str(tmp_path / "blobs")
    os.makedirs(directory)
    segs = SegmentSet(fsync=True)
    digest = "ab" * 32
    seen: list[bool] = []
    real = segments_module.fsync_dir
    segment = segs.segment(os.path.join(directory, ".seg-blobs"))

    def spying(path: str) -> None:
        # Another process would block on the segment's lock, held until now; this
        # one must not have indexed (served) the frame yet either.
        seen.append(digest in segment.index.live)
        real(path)

    monkeypatch.setattr(segments_module, "fsync_dir", spying)
    assert segs.create_many(directory, [(digest, b"blob")]) == [True]
    assert seen == [False]  # not served until its directory entry is durable

    other = str(tmp_path / "other")
    os.makedirs(other)
    synced: list[str] = []

    def failing_once(path: str) -> None:
        synced.append(path)
        if len(synced) == 1:
            _eio()
        real(path)

    segs = SegmentSet(fsync=True)
    monkeypatch.setattr(segments_module, "fsync_dir", failing_once)
    with pytest.raises(OSError, match="Input/output"):
        segs.create_many(other, [(digest, b"blob")])
    assert SegmentSet(fsync=True).read(other, digest) is None
    assert segs.create_many(other, [(digest, b"blob")]) == [True]
    assert len(synced) == 2
    assert SegmentSet(fsync=True).read(other, digest) == b"blob"


def test_a_synced_batch_makes_a_name_found_unsynced_durable(
    tmp_path: Path, monkeypatch
):
    """A blob first written unsynced (a checkpoint's chunk) and then asked for with
    a sync (a record's payload of the same bytes) is synced before the answer.

    Fails when the synced call, finding the name present, returns at once: the
    record referencing the blob would be acknowledged with the blob still unsynced."""
    directory = str(tmp_path / "blobs")
    os.makedirs(directory)
    digest = "cd" * 32
    segs = SegmentSet(fsync=True)
    assert segs.create_many(directory, [(digest, b"chunk")], sync=False) == [True]
    synced: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    assert segs.create_many(directory, [(digest, b"chunk")]) == [False]
    assert synced


KEY = ThreadKey("agent", "failed-sync", "main")


async def test_a_journal_retry_after_a_failed_sync_is_synced(tmp_path: Path):
    """Fails when the retry adopts the slot its failed attempt left: acknowledged
    without any sync of those bytes."""
    # Syncs through os.fdatasync, which the test fails once: a sync handed to the
    # kernel (native AIO, when the append is not alone) would not be seen failing.
    j = Journal(LocalStore(str(tmp_path / "root"), kernel_syncs=False))
    w = await j.acquire(KEY)
    await w.append([MessageAppended(Msg("user", "one"))])
    log_syncs: list[int] = []
    real = os.fdatasync
    failing = [True]

    def fdatasync(fd: int) -> None:
        if "/log/" in os.readlink(f"/proc/self/fd/{fd}"):
            if failing[0]:
                failing[0] = False
                _eio()
            log_syncs.append(fd)
        real(fd)

    os.fdatasync = fdatasync  # type: ignore[assignment]
    try:
        batch = [MessageAppended(Msg("user", "two"))]
        with pytest.raises(StorageError, match="Input/output"):
            await w.append(batch, batch_id="two")
        record = await w.append(batch, batch_id="two")
    finally:
        os.fdatasync = real  # type: ignore[assignment]
    assert record is not None
    assert log_syncs, "the retry was acknowledged without a sync of the log"
    await w.close()
    state = await Journal.open(tmp_path / "root").load(KEY)
    assert [m.text for m in state.context] == ["one", "two"]


def test_a_half_undone_batch_is_not_served_after_the_next_append(
    tmp_path: Path, monkeypatch
):
    """A failed batch whose undo zeroed its first word but not the rest (a second
    I/O error) stays out of reach: the next append clears what is left first.

    Fails when the writer's index takes the half-zeroed bytes for clean reserve:
    the next, shorter frame went over the zero word, the batch's later frame lay
    whole behind it, and the next scan served it (a retry adopted it)."""
    directory = str(tmp_path / "blobs")
    os.makedirs(directory)
    segs = SegmentSet(fsync=True)
    first, big, small = "a" * 64, "b" * 64, "c" * 64
    segs.create_many(directory, [(first, b"first blob")])
    real_pwrite = os.pwrite

    def zeroing_fails(fd: int, data: bytes, offset: int) -> int:
        if len(data) > 4 and not any(bytes(data)):
            _eio()
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "fdatasync", _eio)
    monkeypatch.setattr(os, "pwrite", zeroing_fails)
    with pytest.raises(OSError, match="Input/output"):
        segs.create_many(directory, [(big, b"B" * 3000), (small, b"never acked")])
    monkeypatch.undo()
    segs.create_many(directory, [("e" * 64, b"next")])
    assert SegmentSet(fsync=True).read(directory, small) is None
    assert segs.read(directory, small) is None
    assert segs.create_many(directory, [(small, b"again")]) == [True]
    assert SegmentSet(fsync=True).read(directory, small) == b"again"
