"""Cold readers of many objects read a segment file in one call and copy nothing.

A reader with no index of a segment yet (a new process loading a thread) that wants
many of its objects reads the file whole, indexes it from memory and serves the
objects from the same bytes; ``read_buffers`` serves them as views of that read.
The index scan itself is held to a whole-file parse in ``test_segment_scan.py``.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

from journal import Journal, MessageAppended, Msg, ThreadKey
from stores import segments as sg
from stores.local import LocalStore
from stores.memory import MemoryStore

if TYPE_CHECKING:
    import pytest

BLOBS = "ns/agent/~/s/main/blobs/"


def _record_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every read the segments module makes: (file name, length, offset)."""
    reads: list[tuple[str, int, int]] = []
    for name in ("pread", "pread_buffer"):
        real = getattr(sg, name)

        def counting(fd: int, length: int, offset: int, real=real):
            path = os.readlink(f"/proc/self/fd/{fd}")
            reads.append((os.path.basename(path), length, offset))
            return real(fd, length, offset)

        monkeypatch.setattr(sg, name, counting)
    return reads


def _blobs(count: int, size: int = 20_000) -> list[tuple[str, bytes]]:
    out = []
    for i in range(count):
        data = os.urandom(size + 97 * i)
        out.append((BLOBS + hashlib.sha256(data).hexdigest(), data))
    return out


async def test_a_cold_read_of_many_blobs_reads_their_segment_once(
    tmp_path, monkeypatch
):
    blobs = _blobs(sg.WHOLE_READ_NAMES + 4)
    await LocalStore(tmp_path).create_many(blobs)
    segment = tmp_path / BLOBS / ".seg-blobs"
    reads = _record_reads(monkeypatch)
    got = await LocalStore(tmp_path).read_buffers([k for k, _ in blobs])
    assert [bytes(g) for g in got if g is not None] == [d for _, d in blobs]
    assert all(isinstance(g, memoryview) for g in got)
    # One read, of the whole file: no window of the index scan, no second read.
    assert reads == [(".seg-blobs", segment.stat().st_size, 0)]


async def test_read_many_copies_what_read_buffers_views(tmp_path):
    blobs = _blobs(sg.WHOLE_READ_NAMES + 1)
    keys = [k for k, _ in blobs] + [BLOBS + "0" * 64]  # and one that is missing
    await LocalStore(tmp_path).create_many(blobs)
    for store in (LocalStore(tmp_path), LocalStore(tmp_path)):
        copied = await store.read_many(keys)
        viewed = await store.read_buffers(keys)  # warm now: the span read
        assert all(type(c) is bytes for c in copied[:-1])
        assert copied[-1] is None
        assert viewed[-1] is None
        assert [bytes(v) for v in viewed[:-1]] == copied[:-1] == [d for _, d in blobs]
    memory = MemoryStore()
    await memory.create_many(blobs)
    assert await memory.read_buffers(keys) == await memory.read_many(keys)


async def test_a_few_blobs_are_not_read_whole(tmp_path, monkeypatch):
    """Fewer names than WHOLE_READ_NAMES from a cold blob segment: the windowed
    scan reads headers, not the other objects' bytes."""
    blobs = _blobs(sg.WHOLE_READ_NAMES * 2, size=200_000)
    await LocalStore(tmp_path).create_many(blobs)
    reads = _record_reads(monkeypatch)
    got = await LocalStore(tmp_path).read_buffers([blobs[3][0]])
    assert got == [blobs[3][1]]
    size = (tmp_path / BLOBS / ".seg-blobs").stat().st_size
    assert sum(length for _, length, _ in reads) < size // 2


async def test_a_cold_load_reads_the_chunk_segment_once(tmp_path, monkeypatch):
    key = ThreadKey("whole-agent", "s", user_id="u")
    # Chunk blobs, not log spans: the messages are in the blob segment.
    journal = Journal.open(tmp_path, checkpoint_every=0, log_spans="never")
    async with journal.writer(key, holder="w") as writer:
        for turn in range(800):
            text = f"turn {turn} " + hashlib.sha256(str(turn).encode()).hexdigest() * 8
            await writer.append(
                [MessageAppended(Msg(r, f"{r}: {text}")) for r in ("user", "assistant")]
            )
        await writer.checkpoint()
        expected = writer.state.to_json()
    blobs_dir = tmp_path / key.prefix / "blobs"
    segment = sg.SegmentSet(fsync=False).segment(str(blobs_dir / ".seg-blobs"))
    assert len(segment.names()) >= sg.WHOLE_READ_NAMES
    reads = _record_reads(monkeypatch)
    state = await Journal.open(tmp_path).load(key)
    assert state.to_json() == expected
    blob_reads = [r for r in reads if r[0] == ".seg-blobs"]
    assert blob_reads == [(".seg-blobs", (blobs_dir / ".seg-blobs").stat().st_size, 0)]


async def test_a_logs_records_are_read_as_views_of_one_read(tmp_path, monkeypatch):
    """``read_sibling_buffers`` (a span's records, read to rebuild state) gives
    views of one read of the segment; ``read_siblings`` copies."""
    store = LocalStore(tmp_path)
    log = "t/log/"
    names = [f"{v:020d}.rec" for v in range(1, 41)]
    bodies = [os.urandom(300 + v) for v in range(40)]
    for name, body in zip(names, bodies, strict=True):
        await store.create(log + name, body)
    await store.aclose()
    reads = _record_reads(monkeypatch)
    viewed = await LocalStore(tmp_path).read_sibling_buffers(log, names)
    assert all(isinstance(v, memoryview) for v in viewed)
    assert [bytes(v) for v in viewed if v is not None] == bodies
    assert len(reads) == 1, reads
    copied = await LocalStore(tmp_path).read_siblings(log, names)
    assert all(type(c) is bytes for c in copied)
    assert copied == bodies
