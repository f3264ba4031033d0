"""Bytes cut from a torn-looking segment tail are kept, and verify reports them.

One flipped bit in the header of a segment's last frame makes an acknowledged
record look like a torn write, which the next writer cuts. The cut bytes go to a
quarantine file beside the segment first; ``verify`` reports a quarantined record
as a problem naming its version and the file. A genuinely torn tail (a writer killed
mid-write, a file that ends inside its last frame) is still cut and is no problem.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.engine.log import ThreadLog
from journal.store import ObjectStore, Quarantined
from stores.local import LocalStore
from stores.memory import MemoryStore
from tests.stores._segment_child import (
    NOT_REACHED,
    body_for,
    flip,
    parse_segment,
    record_frame,
    record_name,
)

REPO = Path(__file__).resolve().parents[2]
CHILD = "tests.stores._segment_child"
KEY = ThreadKey("quarantine-agent", "s", user_id="u")


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text))


async def build(root: Path, count: int = 6) -> Path:
    async with Journal(LocalStore(root), checkpoint_every=0).writer(
        KEY, holder="builder"
    ) as w:
        while w.version < count:
            await w.append([say(f"msg-{w.version + 1}")])
    return root / KEY.prefix / "log"


async def take_over(root: Path) -> None:
    async with Journal(LocalStore(root), checkpoint_every=0).writer(
        KEY, holder="next"
    ) as w:
        await w.append([say("after the cut")])


def quarantine_files(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.name.startswith(".quarantine-"))


# Two bits in the header, inside the frame: magic, kind, name length, data length,
# a digit of the name, the header checksum. (One flipped bit is put back by readers,
# which then read the record in place: see test_flip_sweep.)
@pytest.mark.parametrize("at", [1, 4, 6, 10, 16, 36], ids=lambda at: f"byte{at}")
async def test_damaged_last_header_is_kept_and_reported(tmp_path, at):
    log_dir = await build(tmp_path)
    log = ThreadLog(LocalStore(tmp_path), KEY)
    original = (await log.store.read(log.record_key(6)))[0]
    path, frame = record_frame(log_dir, 6)
    whole = path.read_bytes()[frame.offset : frame.end]
    flip(path, frame.offset + at, 0x03)
    assert await LocalStore(tmp_path).list(log.log_dir) == [
        log.record_key(v) for v in range(1, 6)
    ]
    # Before any writer cuts it, verify already calls it a problem, not a leftover.
    report = await Journal.open(tmp_path).verify(KEY)
    assert not report.ok
    assert any("not cut yet" in p.message for p in report.problems), [
        str(p) for p in report.problems
    ]
    assert await LocalStore(tmp_path).leftovers(KEY.prefix) == []

    await take_over(tmp_path)

    # The acknowledged bytes survive, outside the segment (which took new frames).
    files = quarantine_files(log_dir)
    assert len(files) == 1
    kept = files[0].read_bytes()
    # The copy ends at the last non-zero byte: the frame's checksum may end in
    # zeros (odds 1 in 256; test_a_kept_frame_ending_in_zeros covers it).
    assert whole[len(kept) :] == bytes(len(whole) - len(kept))
    assert sum(a != b for a, b in zip(kept, whole, strict=False)) == 1
    assert original in kept
    frames, tail = parse_segment(path)
    assert tail == 0
    # Versions 1 to 5, then the takeover's records from version 6 on.
    assert [f.name for f in frames][:7] == [record_name(v) for v in range(1, 8)]
    assert all(f.data_ok for f in frames)

    found = await LocalStore(tmp_path).quarantined(KEY.prefix)
    assert len(found) == 1
    assert not found[0].torn
    assert not found[0].in_place
    assert found[0].location == str(files[0])

    report = await Journal.open(tmp_path).verify(KEY)
    assert not report.ok
    mine = [p for p in report.problems if files[0].name in p.message]
    assert len(mine) == 1, [str(p) for p in report.problems]


def _ending_in_zeros() -> bytes:
    """Record bytes whose CRC-32, the frame's last four bytes, ends in two zeros."""
    for i in range(1 << 20):
        data = f"record ending in zeros {i}".encode()
        if zlib.crc32(data) & 0xFFFF == 0:
            return data
    raise AssertionError("no such data found")


@pytest.mark.parametrize("at", [1, 16], ids=lambda at: f"byte{at}")
async def test_a_kept_frame_ending_in_zeros(tmp_path, at):
    """A frame whose checksum ends in zero bytes is kept without them.

    The cut keeps the bytes up to the last non-zero one (the reserve's zeros
    follow the frames, and a header beyond repair cannot say where its frame
    ends); the zeros it left out are the frame's last bytes, and its data, which
    an operator restores, is all there."""
    log = ThreadLog(LocalStore(tmp_path), KEY)
    data = _ending_in_zeros()
    for version in range(1, 6):
        await log.store.create(log.record_key(version), b"record %d" % version)
    await log.store.create(log.record_key(6), data)
    path, frame = record_frame(tmp_path / KEY.prefix / "log", 6)
    flip(path, frame.offset + at, 0x03)
    damaged = path.read_bytes()[frame.offset : frame.end]
    assert damaged.endswith(b"\0\0")
    store = LocalStore(tmp_path)
    await store.create(log.record_key(7), b"record 7")
    (found,) = await store.quarantined(KEY.prefix)
    assert not found.torn
    kept = Path(found.location).read_bytes()
    assert kept == damaged.rstrip(b"\0")
    start = frame.data_at - frame.offset
    assert kept[start : start + frame.data_len] == data


async def test_a_record_restored_from_quarantine_makes_the_log_whole(tmp_path):
    """The documented step: the record's bytes, as the plain file of its version.

    The header's magic is damaged beyond one bit; the frame's data (at the offsets
    its intact length fields give) is the record, which an operator restores."""
    log_dir = await build(tmp_path)
    log = ThreadLog(LocalStore(tmp_path), KEY)
    original = (await log.store.read(log.record_key(6)))[0]
    path, frame = record_frame(log_dir, 6)
    flip(path, frame.offset + 1, 0x03)
    store = LocalStore(tmp_path)
    await store.create(log.record_key(7), b"not a record")
    assert await store.delete(log.record_key(7))
    (found,) = await store.quarantined(KEY.prefix)
    assert not found.in_place
    report = await Journal.open(tmp_path).verify(KEY)
    assert not report.ok
    kept = Path(found.location).read_bytes()
    data = kept[
        frame.data_at - frame.offset : frame.data_at - frame.offset + frame.data_len
    ]
    assert data == original
    (log_dir / record_name(6)).write_bytes(data)
    assert (await store.read(log.record_key(6)))[0] == original
    # The kept bytes name no record the store could read: they stay a problem
    # until the operator, having restored the record, deletes the file.
    report = await Journal.open(tmp_path).verify(KEY)
    assert [Path(found.location).name in p.message for p in report.problems] == [True]
    os.unlink(found.location)
    report = await Journal.open(tmp_path).verify(KEY)
    assert report.ok, [str(p) for p in report.problems]


def _append_and_die(root: Path, key: str, size: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", CHILD, str(root), "append", key, "mid-write", str(size)],
        cwd=REPO,
        check=False,
    )
    assert proc.returncode not in (0, NOT_REACHED)


async def test_a_writer_killed_mid_write_is_still_cut_and_no_problem(tmp_path):
    log_dir = await build(tmp_path)
    log = ThreadLog(LocalStore(tmp_path), KEY)
    key = log.record_key(7)
    _append_and_die(tmp_path, key, 64 * 1024)
    path = log_dir / ".seg-00000000000000000000"
    assert parse_segment(path)[1] > 0  # torn bytes after the frames
    await take_over(tmp_path)
    assert parse_segment(path)[1] == 0
    assert body_for(key, 64 * 1024)[:4096] not in path.read_bytes()
    assert quarantine_files(log_dir) == []  # provably never acknowledged
    report = await Journal.open(tmp_path).verify(KEY)
    assert report.ok, [str(p) for p in report.problems]
    assert report.warnings == []


async def test_a_file_ending_inside_its_last_frame_is_still_cut(tmp_path):
    log_dir = await build(tmp_path)
    path, frame = record_frame(log_dir, 6)
    os.truncate(path, frame.end - 10)
    await take_over(tmp_path)
    assert parse_segment(path)[1] == 0
    assert quarantine_files(log_dir) == []
    report = await Journal.open(tmp_path).verify(KEY)
    assert report.ok, [str(p) for p in report.problems]
    assert report.warnings == []


async def test_a_frame_cut_within_its_checksums_is_kept(tmp_path):
    """A frame whose header checks out but whose last few bytes are missing cannot
    be told from an acknowledged one whose checksum ends in zeros: it is kept and
    reported."""
    log_dir = await build(tmp_path)
    path, frame = record_frame(log_dir, 6)
    os.truncate(path, frame.end - 2)
    await take_over(tmp_path)
    (kept,) = quarantine_files(log_dir)
    report = await Journal.open(tmp_path).verify(KEY)
    assert [p.version for p in report.problems if kept.name in p.message] == [6]


async def test_stores_without_quarantine_report_none():
    store: ObjectStore = MemoryStore()
    assert await store.quarantined("") == []
    assert Quarantined("where", None, None, torn=True, detail="d").torn
