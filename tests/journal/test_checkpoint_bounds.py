"""A forged checkpoint costs a load little: what it claims is checked as it is read.

A few small blobs (index blobs repeating one chunk, chunks that decompress to far
more than a chunk may hold) must not make a load build millions of messages or
allocate gigabytes before the checkpoint is refused.
"""

from __future__ import annotations

import hashlib

import msgspec
import pytest
import zstandard

from journal import Journal, MessageAppended, Msg, ThreadKey, codec, compression
from journal.checkpoint import MAX_CHUNK_READ, decode_chunk, ends_chunk
from journal.chunk_index import MAX_INDEX_BYTES
from journal.engine import checkpoints

KEY = ThreadKey("agent", "forged", "main")
FANOUT = 64  # references an index blob may hold


async def one_record(journal: Journal) -> None:
    async with journal.writer(KEY, holder="w") as w:
        await w.append([MessageAppended(Msg("user", "hello", id="m1"))])


async def forge(
    journal: Journal, version: int, chunks: list[str], message_count: int
) -> None:
    """A checkpoint at ``version`` naming ``chunks``, with the hint on it."""
    log = journal._log(KEY)
    record = await log.read_parsed(version)
    state = await journal.load(KEY, version)
    body = codec.CheckpointBody(
        codec.FORMAT_VERSION,
        version,
        record.hash,
        0.0,
        msgspec.msgpack.encode(msgspec.structs.replace(state, context=[])),
        chunks,
        message_count,
        b"",
    )
    await log.create_checkpoint(version, codec.encode_checkpoint(body))
    await log.put_hint(version)


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the chunks loads decode from now on, in order."""
    decoded: list[int] = []

    def counting(data: bytes | memoryview) -> list[Msg]:
        messages = decode_chunk(data)
        decoded.append(len(messages))
        return messages

    monkeypatch.setattr(checkpoints, "decode_chunk", counting)
    return decoded


async def test_a_repeated_chunk_is_decoded_once_and_refused_past_the_count(
    monkeypatch,
):
    journal = Journal.open("memory://repeats", checkpoint_every=0, log_spans="never")
    await one_record(journal)
    log = journal._log(KEY)
    encoder = msgspec.msgpack.Encoder()
    chunk = encoder.encode([Msg("user", "", id="x") for _ in range(200)])
    digest = hashlib.sha256(chunk).hexdigest()
    level1 = encoder.encode([digest] * FANOUT)
    index1 = hashlib.sha256(level1).hexdigest()
    level2 = encoder.encode([f"#1{index1}"] * FANOUT)
    index2 = hashlib.sha256(level2).hexdigest()
    await log.put_blobs([(digest, chunk)])
    await log.put_blobs([(index1, level1), (index2, level2)], index=True)
    # 4,096 references to one chunk of 200 messages: 819,200 messages if built.
    await forge(journal, 1, [f"#2{index2}"], FANOUT * FANOUT)
    decoded = count_decodes(monkeypatch)
    state, warnings = await journal.load_with_warnings(KEY)
    assert len(state.context) == 1
    assert decoded == [200]
    assert len(warnings) == 1
    assert "checkpoint 1 is corrupt" in warnings[0]
    assert f"more than the {FANOUT * FANOUT} messages it claims" in warnings[0]


async def test_a_repeated_chunk_of_a_real_context_loads(monkeypatch):
    """The same messages twice in a context: one chunk named twice, read once."""
    journal = Journal.open("memory://twice", checkpoint_every=0, log_spans="never")
    # The last id ends a chunk, so that each run of three messages is one chunk.
    ids = ["a", "b", next(f"e{i}" for i in range(5000) if ends_chunk(f"e{i}"))]
    async with journal.writer(KEY, holder="w") as w:
        for _ in range(2):
            for i in ids:
                await w.append([MessageAppended(Msg("user", i, id=i))])
        await w.checkpoint()
        head = w.version
    decoded = count_decodes(monkeypatch)
    state, warnings = await journal.load_with_warnings(KEY)
    assert warnings == []
    assert state.version == head
    assert [m.id for m in state.context] == ids * 2
    assert decoded == [3]


def zeros_frame(size: int) -> tuple[str, bytes]:
    """``size`` zero bytes as a zstd frame, under their true digest."""
    data = bytes(size)
    frame = zstandard.ZstdCompressor(level=3).compress(data)
    return hashlib.sha256(data).hexdigest(), frame


@pytest.mark.parametrize("index", [False, True], ids=["chunk", "index"])
async def test_a_chunk_that_decompresses_past_the_limit_is_refused_unread(
    monkeypatch, index
):
    journal = Journal.open(f"memory://bomb-{index}", checkpoint_every=0)
    await one_record(journal)
    log = journal._log(KEY)
    limit = MAX_INDEX_BYTES if index else MAX_CHUNK_READ
    digest, frame = zeros_frame(limit + 1)
    key = log.index_key(digest) if index else log.blob_key(digest)
    await journal.store.create(key, frame)
    # Version 2 holds the one message: only the blob is wrong.
    await forge(journal, 2, [f"#1{digest}" if index else digest], 1)
    asked: list[int] = []
    decompress = compression.decompress

    def watched(data: bytes | memoryview, *limits: int) -> bytes:
        asked.append(limits[0] if limits else -1)  # -1: no limit given
        return decompress(data, *limits)

    monkeypatch.setattr(compression, "decompress", watched)
    state, warnings = await journal.load_with_warnings(KEY)
    assert len(state.context) == 1
    assert asked == [limit]
    assert len(warnings) == 1
    assert "checkpoint 2 is corrupt" in warnings[0]
    assert f"{limit + 1} bytes, more than the {limit}" in warnings[0]
    report = await journal.verify(KEY)
    assert {p.version for p in report.problems} == {2}, report.problems
    assert any(f"more than the {limit} allowed" in p.message for p in report.problems)


async def test_a_chunk_holding_a_message_past_the_limit_still_loads():
    """The writer stores such a chunk as it is: no load decompresses it."""
    journal = Journal.open("memory://huge", checkpoint_every=0, compression="zstd")
    text = "x" * (MAX_CHUNK_READ + 1)
    async with journal.writer(KEY, holder="w") as w:
        await w.append([MessageAppended(Msg("user", text, id="big"))])
        await w.checkpoint()
    state, warnings = await journal.load_with_warnings(KEY)
    assert warnings == []
    assert state.context[0].content == text
    assert (await journal.verify(KEY)).ok
