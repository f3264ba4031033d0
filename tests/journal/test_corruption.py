"""Damaged logs, checkpoints and hints: detected, named, never silently wrong."""

from __future__ import annotations

import struct
import uuid
import zlib

import msgspec
import pytest

from journal import CorruptRecordError, Journal, MessageAppended, Msg, ThreadKey
from journal import codec as jcodec
from journal.log import ThreadLog, version_of
from projections import AgentStateProjection, fold
from stores.testing.journal_contract import RecordingStore


@pytest.fixture(params=["memory", "local"])
def url(request, tmp_path):
    if request.param == "memory":
        return f"memory://corruption-{uuid.uuid4().hex}"
    return str(tmp_path / "journal")


def new_key(**ids) -> ThreadKey:
    return ThreadKey("corrupt-agent", f"s-{uuid.uuid4().hex[:12]}", **ids)


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text, id=f"id-{text}"))


async def build(
    url: str, key: ThreadKey, count: int = 6, checkpoints=(), prefix: str = "msg"
):
    """A thread of ``count`` records (the fence + messages); checkpoints as asked."""
    j = Journal.open(url, checkpoint_every=0)
    async with j.writer(key, holder="builder") as w:
        while w.version < count:
            await w.append([say(f"{prefix}-{w.version + 1}")])
            if w.version in checkpoints:
                await w.checkpoint()
    return j


def fresh(url: str) -> Journal:
    return Journal.open(url, checkpoint_every=0)


async def all_records(j: Journal, key: ThreadKey):
    return [r async for r in j.records(key)]


def replayed(key: ThreadKey, records) -> bytes:
    projection = AgentStateProjection(str(key))
    return msgspec.msgpack.encode(fold(projection, projection.initial(key), records))


async def rewrite(j: Journal, store_key: str, change) -> None:
    data, _ = await j.store.read(store_key)
    await j.store.replace(store_key, change(bytearray(data)), if_match=None)


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


@pytest.mark.parametrize("where", ["magic", "length", "body", "hash", "checksum"])
async def test_flipped_byte_in_a_record(url, where):
    key = new_key()
    j = await build(url, key)
    record_key = ThreadLog(j.store, key).record_key(3)
    raw, _ = await j.store.read(record_key)
    position = {
        "magic": 1,
        "length": 6,
        "body": len(raw) // 2,
        "hash": len(raw) - 4 - 16,
        "checksum": len(raw) - 2,
    }[where]

    def flip(data: bytearray) -> bytes:
        data[position] ^= 0x20
        return bytes(data)

    await rewrite(j, record_key, flip)
    await expect_corrupt(fresh(url), key, 3)


async def test_body_edited_with_a_valid_checksum(url):
    """An edit that keeps the checksum right still breaks the record's own hash."""
    key = new_key()
    j = await build(url, key)
    record_key = ThreadLog(j.store, key).record_key(4)

    def edit(data: bytearray) -> bytes:
        at = bytes(data).index(b"msg-4")
        data[at : at + 5] = b"MSG-4"
        return with_crc(data)

    await rewrite(j, record_key, edit)
    await expect_corrupt(fresh(url), key, 4, words=["hash"])


async def test_hash_edited_with_a_valid_checksum(url):
    key = new_key()
    j = await build(url, key)
    record_key = ThreadLog(j.store, key).record_key(2)

    def edit(data: bytearray) -> bytes:
        data[-10] ^= 0x01
        return with_crc(data)

    await rewrite(j, record_key, edit)
    await expect_corrupt(fresh(url), key, 2)


@pytest.mark.parametrize("version", [3, 6])
async def test_truncated_record(url, version):
    key = new_key()
    j = await build(url, key)
    record_key = ThreadLog(j.store, key).record_key(version)
    await rewrite(j, record_key, lambda d: bytes(d[: len(d) // 2]))
    await expect_corrupt(fresh(url), key, version)


async def test_empty_record(url):
    key = new_key()
    j = await build(url, key)
    await rewrite(j, ThreadLog(j.store, key).record_key(5), lambda d: b"")
    await expect_corrupt(fresh(url), key, 5)


async def test_deleted_middle_record(url):
    key = new_key()
    j = await build(url, key)
    assert await j.store.delete(ThreadLog(j.store, key).record_key(3))
    reader = fresh(url)
    await expect_corrupt(reader, key, 3, words=["missing"])
    report = await reader.verify(key)
    assert [p.version for p in report.problems] == [3]
    assert "missing" in str(report.problems[0])


async def test_records_swapped_on_storage(url):
    """Swapping two record objects is caught: each names its own version."""
    key = new_key()
    j = await build(url, key)
    log = ThreadLog(j.store, key)
    three, _ = await j.store.read(log.record_key(3))
    four, _ = await j.store.read(log.record_key(4))
    await j.store.replace(log.record_key(3), four, if_match=None)
    await j.store.replace(log.record_key(4), three, if_match=None)
    await expect_corrupt(fresh(url), key, 3)
    report = await fresh(url).verify(key)
    assert {p.version for p in report.problems} >= {3, 4}


async def test_records_reordered_and_reencoded(url):
    """Re-encoding swapped commits at each other's versions breaks the hash chain."""
    key = new_key()
    j = await build(url, key)
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
    await j.store.replace(log.record_key(3), new3, if_match=None)
    await j.store.replace(log.record_key(4), new4, if_match=None)
    reader = fresh(url)
    await expect_corrupt(reader, key, 4, words=["hash chain"])
    # Both re-encoded records have new hashes: the chain breaks after each.
    report = await reader.verify(key)
    assert [p.version for p in report.problems] == [4, 5]
    assert all("hash chain" in str(p) for p in report.problems)


async def test_record_from_another_thread_spliced_in(url):
    key, other = new_key(), new_key()
    j = await build(url, key)
    await build(url, other, prefix="other")
    data, _ = await j.store.read(ThreadLog(j.store, other).record_key(3))
    await j.store.replace(ThreadLog(j.store, key).record_key(3), data, if_match=None)
    await expect_corrupt(fresh(url), key, 3, words=["hash chain"])


async def test_flipped_byte_in_a_blob(url):
    key = new_key()
    j = Journal.open(url, checkpoint_every=0)
    async with j.writer(key) as w:
        rec = await w.append([say("z" * (jcodec.BLOB_THRESHOLD + 100))])
        await w.append([say("after")])
    (blob,) = await j.store.list(ThreadLog(j.store, key).blob_dir)

    def flip(data: bytearray) -> bytes:
        data[len(data) // 2] ^= 0x01
        return bytes(data)

    await rewrite(j, blob, flip)
    reader = fresh(url)
    with pytest.raises(CorruptRecordError) as info:
        await reader.load(key)
    assert blob.rsplit("/", 1)[-1] in str(info.value)
    assert info.value.version == rec.version
    report = await reader.verify(key)
    assert not report.ok
    assert any(p.version == rec.version for p in report.problems)


# --- checkpoints and the hint -------------------------------------------------------


async def expect_right_state(url, key, *, warned_about=(), quiet=True):
    """load gives the full replay's state, warning about these checkpoints."""
    reader = fresh(url)
    expected = replayed(key, await all_records(reader, key))
    state, warnings = await reader.load_with_warnings(key)
    assert msgspec.msgpack.encode(state) == expected
    for version in warned_about:
        assert any(f"checkpoint {version}" in w for w in warnings), warnings
    if quiet and not warned_about:
        assert warnings == []
    assert msgspec.msgpack.encode(await fresh(url).load(key)) == expected
    assert await fresh(url).head(key) == state.version


@pytest.mark.parametrize("where", ["magic", "body", "checksum"])
async def test_flipped_byte_in_a_checkpoint(url, where):
    key = new_key()
    j = await build(url, key, count=9, checkpoints=(6,))
    ckpt_key = ThreadLog(j.store, key).checkpoint_key(6)
    raw, _ = await j.store.read(ckpt_key)
    position = {"magic": 0, "body": len(raw) // 2, "checksum": len(raw) - 1}[where]

    def flip(data: bytearray) -> bytes:
        data[position] ^= 0x10
        return bytes(data)

    await rewrite(j, ckpt_key, flip)
    await expect_right_state(url, key, warned_about=[6])
    report = await fresh(url).verify(key)
    assert not report.ok
    assert any(f.version == 6 for f in report.problems), report.problems


async def test_corrupt_newest_checkpoint_falls_back_to_an_older_one(url):
    key = new_key()
    j = await build(url, key, count=12, checkpoints=(4, 8))
    log = ThreadLog(j.store, key)
    await rewrite(j, log.checkpoint_key(8), lambda d: bytes(d[:-1]))
    counting = RecordingStore(Journal.open(url).store)
    reader = Journal(counting, checkpoint_every=0)
    state, warnings = await reader.load_with_warnings(key)
    assert any("checkpoint 8" in w for w in warnings), warnings
    assert msgspec.msgpack.encode(state) == replayed(
        key, await all_records(fresh(url), key)
    )
    read_versions = [
        version_of(k) for op, k, _ in counting.calls if op == "read" and "/log/" in k
    ]
    assert read_versions
    assert min(read_versions) > 4, read_versions


async def test_checkpoint_missing_a_chunk(url):
    key = new_key()
    j = await build(url, key, count=9, checkpoints=(6,))
    log = ThreadLog(j.store, key)
    blobs = await j.store.list(log.blob_dir)
    assert blobs  # the checkpoint's message chunks
    for blob in blobs:
        await j.store.delete(blob)
    await expect_right_state(url, key, warned_about=[6])


@pytest.mark.parametrize("at_head", [False, True])
async def test_foreign_checkpoint_is_refused(url, at_head):
    """A checkpoint copied from another thread's log does not match its hashes."""
    key, other = new_key(), new_key()
    version = 8 if at_head else 6
    j = await build(url, key, count=8)
    await build(url, other, count=8, checkpoints=(version,), prefix="other")
    mine, theirs = ThreadLog(j.store, key), ThreadLog(j.store, other)
    data, _ = await j.store.read(theirs.checkpoint_key(version))
    await j.store.create(mine.checkpoint_key(version), data)
    for blob in await j.store.list(theirs.blob_dir):
        chunk, _ = await j.store.read(blob)
        await j.store.create(mine.blob_key(blob.rsplit("/", 1)[-1]), chunk)
    await j.store.replace(mine.hint_key, f"{version:020d}\n".encode(), if_match=None)
    await expect_right_state(url, key, warned_about=[version])
    state = await fresh(url).load(key)
    assert not any(m.text.startswith("other") for m in state.context)
    report = await fresh(url).verify(key)
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
async def test_bad_last_checkpoint_hint(url, hint, with_checkpoint):
    key = new_key()
    j = await build(url, key, count=9, checkpoints=(6,) if with_checkpoint else ())
    await j.store.replace(ThreadLog(j.store, key).hint_key, hint, if_match=None)
    reader = fresh(url)
    expected = replayed(key, await all_records(reader, key))
    state = await reader.load(key)
    assert msgspec.msgpack.encode(state) == expected
    assert await reader.head(key) == 9
    for at in (0, 5, 6, 9):
        past = await fresh(url).load(key, at_version=at)
        records = await all_records(reader, key)
        assert msgspec.msgpack.encode(past) == replayed(key, records[:at])
    # A writer resumes at the right place.
    async with reader.writer(key) as w:
        assert w.base_version == 9
        await w.append([say("after a bad hint")])
    # The hint may still name a missing checkpoint: a warning, never a wrong state.
    await expect_right_state(url, key, quiet=False)


async def test_hint_lagging_behind_the_newest_checkpoint(url):
    """A checkpoint written but not yet named by the hint (a crash in between)."""
    key = new_key()
    j = await build(url, key, count=10, checkpoints=(4, 8))
    await j.store.replace(
        ThreadLog(j.store, key).hint_key, f"{4:020d}\n".encode(), if_match=None
    )
    await expect_right_state(url, key)
    report = await fresh(url).verify(key)
    assert report.ok, report.problems
