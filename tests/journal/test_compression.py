"""``Journal(compression="zstd")``: what is stored, what it changes, what it must not.

The journal contract also runs on compressed journals (``tests/journal/test_contract``);
these tests look at the stored bytes, mixed logs, damage and a missing zstandard.
"""

from __future__ import annotations

import hashlib
import uuid

import msgspec
import pytest

from journal import (
    CompressionUnavailableError,
    CorruptRecordError,
    Journal,
    MessageAppended,
    Msg,
    ThreadKey,
    codec,
)
from journal import compression as jcompression
from journal.codec import RECORD_MAGIC, RECORD_ZMAGIC
from journal.engine.log import ThreadLog
from projections import AgentStateProjection, fold
from stores.local import LocalStore


def words(i: int, n: int = 60) -> str:
    return " ".join(f"word{(i * 7 + k) % 97}" for k in range(n))


def turn(i: int) -> list[object]:
    return [
        MessageAppended(Msg("user", words(i), id=f"u{i}")),
        MessageAppended(Msg("assistant", words(i + 1, 120), id=f"a{i}")),
    ]


async def write(
    j: Journal, key: ThreadKey, turns: range, *, checkpoint: bool = False
) -> list[bytes]:
    hashes = []
    async with j.writer(key, holder="w") as w:
        for i in turns:
            record = await w.append(turn(i), batch_id=f"b{i}")
            hashes.append(bytes.fromhex(record.hash))
        if checkpoint:
            await w.checkpoint()
    return hashes


async def stored(j: Journal, key: ThreadKey) -> list[bytes]:
    log = ThreadLog(j.store, key)
    return [(await j.store.read(log.record_key(v)))[0] for v in await log.versions()]


async def test_records_and_chunks_are_stored_compressed(tmp_path):
    key = ThreadKey("agent", "s")
    # Chunk blobs, to see them compressed (log spans would store none).
    plain = Journal(
        LocalStore(tmp_path / "plain"), clock=lambda: 1000.0, log_spans="never"
    )
    packed = Journal(
        LocalStore(tmp_path / "packed"),
        compression="zstd",
        clock=lambda: 1000.0,
        log_spans="never",
    )
    await write(plain, key, range(40), checkpoint=True)
    await write(packed, key, range(40), checkpoint=True)
    raw_plain, raw_packed = await stored(plain, key), await stored(packed, key)
    assert {r[:4] for r in raw_plain} == {RECORD_MAGIC}
    # The fence record holds the lease event only: small records compress too.
    assert {r[:4] for r in raw_packed} == {RECORD_ZMAGIC}
    assert sum(map(len, raw_packed)) < 0.8 * sum(map(len, raw_plain))
    log = ThreadLog(packed.store, key)
    blobs = await packed.store.list(log.blob_dir)
    assert blobs
    for blob_key in blobs:
        data, _ = await packed.store.read(blob_key)
        assert jcompression.is_compressed(data)
        digest = blob_key.rpartition("/")[2]
        assert hashlib.sha256(jcompression.decompress(data)).hexdigest() == digest
    # Every journal reads it, with or without the setting.
    for reader in (Journal.open(tmp_path / "packed"), packed):
        state = await reader.load(key)
        assert [m.text for m in state.context] == [
            m.message.text for i in range(40) for m in turn(i)
        ]
        report = await reader.verify(key)
        assert report.problems == []
        assert report.warnings == []


def test_hashes_do_not_depend_on_compression():
    def encode(compress):
        return codec.encode_record(
            version=7,
            epoch=2,
            writer="w",
            batch_id="b7",
            run_id=None,
            committed_at=1000.0,
            prev_hash=bytes(range(32)),
            events=turn(7),
            compress=compress,
        )

    plain, packed = encode(None), encode(jcompression.compressor("zstd"))
    assert packed.data[:4] == RECORD_ZMAGIC
    assert len(packed.data) < len(plain.data)
    assert (packed.hash, packed.content_digest) == (plain.hash, plain.content_digest)
    a = codec.parse_record(plain.data, label="t", version=7)
    b = codec.parse_record(packed.data, label="t", version=7)
    assert (a.body, a.hash) == (b.body, b.hash)


async def test_a_log_compressed_halfway_reads_and_verifies(tmp_path):
    key = ThreadKey("agent", "s")
    await write(Journal.open(tmp_path, checkpoint_every=7), key, range(20))
    await write(
        Journal.open(tmp_path, checkpoint_every=7, compression="zstd"),
        key,
        range(20, 40),
    )
    j = Journal.open(tmp_path)
    magics = [r[:4] for r in await stored(j, key)]
    assert RECORD_MAGIC in magics
    assert RECORD_ZMAGIC in magics
    records = [r async for r in j.records(key)]
    projection = AgentStateProjection(str(key))
    replayed = fold(projection, projection.initial(key), records)
    state = await j.load(key)
    assert msgspec.msgpack.encode(state) == msgspec.msgpack.encode(replayed)
    assert len(state.context) == 80
    report = await j.verify(key)
    assert report.problems == []
    assert report.warnings == []


async def test_a_large_event_blob_is_compressed(tmp_path):
    key = ThreadKey("agent", "s")
    big = MessageAppended(Msg("tool", words(3, 30_000), id="big"))
    j = Journal.open(tmp_path, compression="zstd")
    async with j.writer(key, holder="w") as w:
        await w.append([big])
    log = ThreadLog(j.store, key)
    (blob_key,) = await j.store.list(log.blob_dir)
    data, _ = await j.store.read(blob_key)
    assert jcompression.is_compressed(data)
    assert len(data) < len(msgspec.msgpack.encode(big)) // 2
    state = await Journal.open(tmp_path).load(key)
    assert state.context[-1].text == big.message.text


async def test_a_damaged_compressed_record_is_named(tmp_path):
    key = ThreadKey("agent", "s")
    url = f"memory://compression-{uuid.uuid4().hex}"
    j = Journal.open(url, compression="zstd", checkpoint_every=0)
    await write(j, key, range(5))
    log = ThreadLog(j.store, key)
    raw, _ = await j.store.read(log.record_key(3))
    damaged = bytearray(raw)
    damaged[len(damaged) // 2] ^= 0x10
    await j.store.replace(log.record_key(3), bytes(damaged), if_match=None)
    with pytest.raises(CorruptRecordError) as info:
        await Journal.open(url).load(key)
    assert info.value.version == 3


async def test_a_damaged_compressed_chunk_is_reported(tmp_path):
    key = ThreadKey("agent", "s")
    url = f"memory://compression-{uuid.uuid4().hex}"
    j = Journal.open(url, compression="zstd", checkpoint_every=0)
    await write(j, key, range(30), checkpoint=True)
    log = ThreadLog(j.store, key)
    first = sorted(await j.store.list(log.blob_dir))[0]
    raw, _ = await j.store.read(first)
    for at in (8, len(raw) - 3):  # a frame that fails, and one that decodes wrong
        damaged = bytearray(raw)
        damaged[at] ^= 0x01
        await j.store.replace(first, bytes(damaged), if_match=None)
        report = await Journal.open(url).verify(key)
        assert any("chunk" in p.message for p in report.problems), report.problems
        # A load skips the damaged checkpoint (with a warning) and replays instead.
        state, warnings = await Journal.open(url).load_with_warnings(key)
        assert len(state.context) == 60
        assert warnings


async def test_without_zstandard(tmp_path, monkeypatch):
    key = ThreadKey("agent", "s")
    await write(Journal.open(tmp_path, compression="zstd"), key, range(3))

    def missing() -> None:
        raise CompressionUnavailableError

    monkeypatch.setattr(jcompression, "_zstd", missing)
    with pytest.raises(CompressionUnavailableError, match=r"agent-journal\[zstd\]"):
        Journal.open(tmp_path, compression="zstd")
    # Reading compressed records says what is missing; it is not "corruption".
    with pytest.raises(ImportError, match="zstandard"):
        await Journal.open(tmp_path).load(key)


def test_an_unknown_compression_is_refused(tmp_path):
    with pytest.raises(ValueError, match="'gzip'"):
        Journal.open(tmp_path, compression="gzip")
