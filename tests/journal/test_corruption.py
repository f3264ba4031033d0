"""Damaged logs, checkpoints and hints: detected, named, never silently wrong.

Each test runs on four bindings: the memory store and the local store in segment
mode, damaged through the store's own ``replace`` (a segment appends a newer frame);
the local store in segment mode damaged on disk (bytes changed inside the record's
frame, whose data checksum then fails, or the frame rewritten whole when the record's
length changes); and the local store publishing a file per record, damaged on disk.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from journal import CorruptRecordError, Journal, MessageAppended, Msg, ThreadKey
from journal import codec as jcodec
from journal.engine.log import ThreadLog
from journal.layout import version_of
from projections import AgentStateProjection, fold
from stores.testing.journal_contract import RecordingStore
from tests.stores._segment_child import PUT, encode_frame, object_frame


@dataclass(frozen=True)
class Where:
    """A journal's URL, its storage options, and how damage is done to it."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)
    disk: bool = False  # change bytes on disk rather than through the store

    def open(self, **kwargs: Any) -> Journal:
        return Journal.open(self.url, **kwargs, **self.options)


@pytest.fixture(params=["memory", "local", "local-disk", "local-files"])
def where(request, tmp_path) -> Where:
    root = str(tmp_path / "journal")
    return {
        "memory": lambda: Where(f"memory://corruption-{uuid.uuid4().hex}"),
        "local": lambda: Where(root),
        "local-disk": lambda: Where(root, disk=True),
        "local-files": lambda: Where(root, {"segments": False}, disk=True),
    }[request.param]()


def new_key(**ids) -> ThreadKey:
    return ThreadKey("corrupt-agent", f"s-{uuid.uuid4().hex[:12]}", **ids)


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text, id=f"id-{text}"))


async def build(
    where: Where,
    key: ThreadKey,
    count: int = 6,
    checkpoints=(),
    prefix: str = "msg",
    log_spans: str = "dense",
):
    """A thread of ``count`` records (the fence + messages); checkpoints as asked.

    One message a record: with the default ``log_spans`` its checkpoints copy
    their messages into chunk blobs; with ``"always"`` they name log spans.
    """
    j = where.open(checkpoint_every=0, log_spans=log_spans)
    async with j.writer(key, holder="builder") as w:
        while w.version < count:
            await w.append([say(f"{prefix}-{w.version + 1}")])
            if w.version in checkpoints:
                await w.checkpoint()
    return j


def fresh(where: Where) -> Journal:
    return where.open(checkpoint_every=0)


async def all_records(j: Journal, key: ThreadKey):
    return [r async for r in j.records(key)]


def replayed(key: ThreadKey, records) -> bytes:
    projection = AgentStateProjection(str(key))
    return msgspec.msgpack.encode(fold(projection, projection.initial(key), records))


async def overwrite(where: Where, j: Journal, store_key: str, data: bytes) -> None:
    """Put other bytes under an existing key, through the store or on disk."""
    if not where.disk:
        await j.store.replace(store_key, data, if_match=None)
        return
    path = Path(where.url, store_key)
    if path.exists():  # a plain file (checkpoints, blobs, records as files)
        path.write_bytes(data)  # in place: same file, new bytes
        return
    segment, frame = object_frame(path.parent, path.name)
    old = segment.read_bytes()[frame.data_at : frame.data_at + frame.data_len]
    if len(data) == frame.data_len:
        # Damage inside the frame: its header holds, its data checksum fails.
        with segment.open("r+b") as fh:
            fh.seek(frame.data_at)
            fh.write(data)
        assert object_frame(path.parent, path.name)[1].data_ok is (data == old)
    else:
        # A record of another length: the frame rewritten whole, valid as a frame.
        content = segment.read_bytes()
        segment.write_bytes(
            content[: frame.offset]
            + encode_frame(PUT, path.name, data)
            + content[frame.end :]
        )


async def rewrite(where: Where, j: Journal, store_key: str, change) -> None:
    data, _ = await j.store.read(store_key)
    await overwrite(where, j, store_key, change(bytearray(data)))


def with_crc(data: bytearray) -> bytes:
    """Recompute the trailing checksum: a tamper that keeps the framing valid."""
    data[-4:] = struct.pack(">I", zlib.crc32(bytes(data[:-4])))
    return bytes(data)


async def drain(j: Journal, key: ThreadKey, seen: list[int]) -> None:
    async for record in j.records(key):
        seen.append(record.version)  # noqa: PERF401 - keeps what came before an error


async def expect_corrupt(j: Journal, key: ThreadKey, version: int, words=()) -> None:
    """load, records and verify all name ``version`` as corrupt."""
    with pytest.raises(CorruptRecordError) as info:
        await j.load(key)
    assert info.value.version == version, str(info.value)
    assert str(key) in str(info.value)
    assert f"version {version}" in str(info.value)
    for word in words:
        assert word in str(info.value)
    seen: list[int] = []
    with pytest.raises(CorruptRecordError) as info:
        await drain(j, key, seen)
    assert info.value.version == version
    assert seen == list(range(1, len(seen) + 1))
    assert all(v < version for v in seen)
    report = await j.verify(key)
    assert not report.ok
    assert any(p.version == version for p in report.problems), [
        str(p) for p in report.problems
    ]


# --- records ----------------------------------------------------------------------


@pytest.mark.parametrize("spot", ["magic", "length", "body", "hash", "checksum"])
async def test_flipped_byte_in_a_record(where, spot):
    key = new_key()
    j = await build(where, key)
    record_key = ThreadLog(j.store, key).record_key(3)
    raw, _ = await j.store.read(record_key)
    position = {
        "magic": 1,
        "length": 6,
        "body": len(raw) // 2,
        "hash": len(raw) - 4 - 16,
        "checksum": len(raw) - 2,
    }[spot]

    def flip(data: bytearray) -> bytes:
        data[position] ^= 0x20
        return bytes(data)

    await rewrite(where, j, record_key, flip)
    await expect_corrupt(fresh(where), key, 3)


async def test_body_edited_with_a_valid_checksum(where):
    """An edit that keeps the checksum right still breaks the record's own hash."""
    key = new_key()
    j = await build(where, key)
    record_key = ThreadLog(j.store, key).record_key(4)

    def edit(data: bytearray) -> bytes:
        at = bytes(data).index(b"msg-4")
        data[at : at + 5] = b"MSG-4"
        return with_crc(data)

    await rewrite(where, j, record_key, edit)
    await expect_corrupt(fresh(where), key, 4, words=["hash"])


async def test_hash_edited_with_a_valid_checksum(where):
    key = new_key()
    j = await build(where, key)
    record_key = ThreadLog(j.store, key).record_key(2)

    def edit(data: bytearray) -> bytes:
        data[-10] ^= 0x01
        return with_crc(data)

    await rewrite(where, j, record_key, edit)
    await expect_corrupt(fresh(where), key, 2)


@pytest.mark.parametrize("version", [3, 6])
async def test_truncated_record(where, version):
    key = new_key()
    j = await build(where, key)
    record_key = ThreadLog(j.store, key).record_key(version)
    await rewrite(where, j, record_key, lambda d: bytes(d[: len(d) // 2]))
    await expect_corrupt(fresh(where), key, version)


async def test_empty_record(where):
    key = new_key()
    j = await build(where, key)
    await rewrite(where, j, ThreadLog(j.store, key).record_key(5), lambda d: b"")
    await expect_corrupt(fresh(where), key, 5)


async def test_deleted_middle_record(where):
    key = new_key()
    j = await build(where, key)
    assert await j.store.delete(ThreadLog(j.store, key).record_key(3))
    reader = fresh(where)
    await expect_corrupt(reader, key, 3, words=["missing"])
    report = await reader.verify(key)
    assert [p.version for p in report.problems] == [3]
    assert "missing" in str(report.problems[0])


async def test_records_swapped_on_storage(where):
    """Swapping two record objects is caught: each names its own version."""
    key = new_key()
    j = await build(where, key)
    log = ThreadLog(j.store, key)
    three, _ = await j.store.read(log.record_key(3))
    four, _ = await j.store.read(log.record_key(4))
    await overwrite(where, j, log.record_key(3), four)
    await overwrite(where, j, log.record_key(4), three)
    await expect_corrupt(fresh(where), key, 3)
    report = await fresh(where).verify(key)
    assert {p.version for p in report.problems} >= {3, 4}


async def test_records_reordered_and_reencoded(where):
    """Re-encoding swapped commits at each other's versions breaks the hash chain."""
    key = new_key()
    j = await build(where, key)
    log = ThreadLog(j.store, key)
    label = str(key)
    parsed = {v: await log.read_parsed(v) for v in (3, 4)}
    records = {v: jcodec.materialize(p, label=label) for v, p in parsed.items()}

    def reencode(version: int, source: int) -> bytes:
        body = parsed[version].body
        return jcodec.encode_record(
            version=version,
            epoch=body.epoch,
            writer=body.writer,
            batch_id=parsed[source].body.batch_id,
            run_id=body.run_id,
            committed_at=body.committed_at,
            prev_hash=body.prev_hash,
            events=records[source].events,
        ).data

    new3, new4 = reencode(3, 4), reencode(4, 3)
    await overwrite(where, j, log.record_key(3), new3)
    await overwrite(where, j, log.record_key(4), new4)
    reader = fresh(where)
    await expect_corrupt(reader, key, 4, words=["hash chain"])
    # Both re-encoded records have new hashes: the chain breaks after each.
    report = await reader.verify(key)
    assert [p.version for p in report.problems] == [4, 5]
    assert all("hash chain" in str(p) for p in report.problems)


async def test_record_from_another_thread_spliced_in(where):
    key, other = new_key(), new_key()
    j = await build(where, key)
    await build(where, other, prefix="other")
    data, _ = await j.store.read(ThreadLog(j.store, other).record_key(3))
    await overwrite(where, j, ThreadLog(j.store, key).record_key(3), data)
    await expect_corrupt(fresh(where), key, 3, words=["hash chain"])


async def test_flipped_byte_in_a_blob(where):
    key = new_key()
    j = where.open(checkpoint_every=0)
    async with j.writer(key) as w:
        rec = await w.append([say("z" * (jcodec.BLOB_THRESHOLD + 100))])
        await w.append([say("after")])
    (blob,) = await j.store.list(ThreadLog(j.store, key).blob_dir)

    def flip(data: bytearray) -> bytes:
        data[len(data) // 2] ^= 0x01
        return bytes(data)

    await rewrite(where, j, blob, flip)
    reader = fresh(where)
    with pytest.raises(CorruptRecordError) as info:
        await reader.load(key)
    assert blob.rsplit("/", 1)[-1] in str(info.value)
    assert info.value.version == rec.version
    report = await reader.verify(key)
    assert not report.ok
    assert any(p.version == rec.version for p in report.problems)


# --- checkpoints and the hint -------------------------------------------------------


async def expect_right_state(where, key, *, warned_about=(), quiet=True):
    """load gives the full replay's state, warning about these checkpoints."""
    reader = fresh(where)
    expected = replayed(key, await all_records(reader, key))
    state, warnings = await reader.load_with_warnings(key)
    assert msgspec.msgpack.encode(state) == expected
    for version in warned_about:
        assert any(f"checkpoint {version}" in w for w in warnings), warnings
    if quiet and not warned_about:
        assert warnings == []
    assert msgspec.msgpack.encode(await fresh(where).load(key)) == expected
    assert await fresh(where).head(key) == state.version


@pytest.mark.parametrize("spot", ["magic", "body", "checksum"])
async def test_flipped_byte_in_a_checkpoint(where, spot):
    key = new_key()
    j = await build(where, key, count=9, checkpoints=(6,))
    ckpt_key = ThreadLog(j.store, key).checkpoint_key(6)
    raw, _ = await j.store.read(ckpt_key)
    position = {"magic": 0, "body": len(raw) // 2, "checksum": len(raw) - 1}[spot]

    def flip(data: bytearray) -> bytes:
        data[position] ^= 0x10
        return bytes(data)

    await rewrite(where, j, ckpt_key, flip)
    await expect_right_state(where, key, warned_about=[6])
    report = await fresh(where).verify(key)
    assert not report.ok
    assert any(f.version == 6 for f in report.problems), report.problems


async def test_corrupt_newest_checkpoint_falls_back_to_an_older_one(where):
    key = new_key()
    j = await build(where, key, count=12, checkpoints=(4, 8))
    log = ThreadLog(j.store, key)
    await rewrite(where, j, log.checkpoint_key(8), lambda d: bytes(d[:-1]))
    counting = RecordingStore(where.open().store)
    reader = Journal(counting, checkpoint_every=0)
    state, warnings = await reader.load_with_warnings(key)
    assert any("checkpoint 8" in w for w in warnings), warnings
    assert msgspec.msgpack.encode(state) == replayed(
        key, await all_records(fresh(where), key)
    )
    # It started from checkpoint 4, not from the beginning.
    assert not any("checkpoint 4" in w for w in warnings), warnings
    read_versions = [
        version_of(k) for op, k, _ in counting.calls if op == "read" and "/log/" in k
    ]
    assert read_versions
    assert min(read_versions) > 4, read_versions


async def test_checkpoint_missing_a_chunk(where):
    key = new_key()
    j = await build(where, key, count=9, checkpoints=(6,))
    log = ThreadLog(j.store, key)
    blobs = await j.store.list(log.blob_dir)
    assert blobs  # the checkpoint's message chunks
    for blob in blobs:
        await j.store.delete(blob)
    await expect_right_state(where, key, warned_about=[6])


async def test_checkpoint_log_span_that_the_log_does_not_match(where):
    """A span naming more messages than its records add, or another chunk's digest."""
    key = new_key()
    j = await build(where, key, count=9, checkpoints=(6,), log_spans="always")
    log = ThreadLog(j.store, key)
    body = jcodec.decode_checkpoint(await log.read_checkpoint(6))
    [ref] = body.chunks
    first, skip, last, count, digest = ref[1:].split(".")
    for bad in (
        f"@{first}.{skip}.{last}.{int(count) + 1}.{digest}",
        f"@{first}.{skip}.{last}.{count}.{'0' * 64}",
    ):
        changed = msgspec.structs.replace(body, chunks=[bad])
        await overwrite(
            where, j, log.checkpoint_key(6), jcodec.encode_checkpoint(changed)
        )
        report = await fresh(where).verify(key)
        assert any(f.version == 6 and "log span" in f.message for f in report.problems)
        if bad.endswith(digest):
            await expect_right_state(where, key, warned_about=[6])


@pytest.mark.parametrize("log_spans", ["dense", "always"])
@pytest.mark.parametrize("at_head", [False, True])
async def test_foreign_checkpoint_is_refused(where, at_head, log_spans):
    """A checkpoint copied from another thread's log does not match its hashes.

    With ``"always"`` its log spans read this thread's records, which add as many
    messages as the other's: the record at its version, read by a span, is then
    what tells it apart (its stored hash is not the one the checkpoint names).
    """
    key, other = new_key(), new_key()
    version = 8 if at_head else 6
    j = await build(where, key, count=8)
    await build(
        where,
        other,
        count=8,
        checkpoints=(version,),
        prefix="other",
        log_spans=log_spans,
    )
    mine, theirs = ThreadLog(j.store, key), ThreadLog(j.store, other)
    data, _ = await j.store.read(theirs.checkpoint_key(version))
    await j.store.create(mine.checkpoint_key(version), data)
    for blob in await j.store.list(theirs.blob_dir):
        chunk, _ = await j.store.read(blob)
        await j.store.create(mine.blob_key(blob.rsplit("/", 1)[-1]), chunk)
    await j.store.replace(mine.hint_key, f"{version:020d}\n".encode(), if_match=None)
    await expect_right_state(where, key, warned_about=[version])
    state = await fresh(where).load(key)
    assert not any(m.text.startswith("other") for m in state.context)
    report = await fresh(where).verify(key)
    assert not report.ok
    assert any(f.version == version for f in report.problems)


@pytest.mark.parametrize(
    "hint",
    [
        b"00000000000000000999\n",
        b"00000000000000000003\n",
        b"garbage",
        b"\xff\xfe\x00",
        b"",
        b"-5",
    ],
)
@pytest.mark.parametrize("with_checkpoint", [False, True])
async def test_bad_last_checkpoint_hint(where, hint, with_checkpoint):
    key = new_key()
    j = await build(where, key, count=9, checkpoints=(6,) if with_checkpoint else ())
    await j.store.replace(ThreadLog(j.store, key).hint_key, hint, if_match=None)
    reader = fresh(where)
    expected = replayed(key, await all_records(reader, key))
    state = await reader.load(key)
    assert msgspec.msgpack.encode(state) == expected
    assert await reader.head(key) == 9
    for at in (0, 5, 6, 9):
        past = await fresh(where).load(key, at_version=at)
        records = await all_records(reader, key)
        assert msgspec.msgpack.encode(past) == replayed(key, records[:at])
    # A writer resumes at the right place.
    async with reader.writer(key) as w:
        assert w.base_version == 9
        await w.append([say("after a bad hint")])
    # The hint may still name a missing checkpoint: a warning, never a wrong state.
    await expect_right_state(where, key, quiet=False)


async def test_hint_lagging_behind_the_newest_checkpoint(where):
    """A checkpoint written but not yet named by the hint (a crash in between)."""
    key = new_key()
    j = await build(where, key, count=10, checkpoints=(4, 8))
    await j.store.replace(
        ThreadLog(j.store, key).hint_key, f"{4:020d}\n".encode(), if_match=None
    )
    await expect_right_state(where, key)
    report = await fresh(where).verify(key)
    assert report.ok, report.problems
