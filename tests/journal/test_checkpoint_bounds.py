"""A forged checkpoint costs a load little: what it claims is checked as it is read.

A few small blobs (index blobs repeating one chunk, chunks that decompress to far
more than a chunk may hold) must not make a load build millions of messages or
allocate gigabytes before the checkpoint is refused.
"""

from __future__ import annotations

import hashlib

import msgspec

from journal import Journal, MessageAppended, Msg, ThreadKey, codec
from journal.checkpoint import decode_chunk, ends_chunk
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
    decoded: list[int] = []

    def counting(data: bytes | memoryview) -> list[Msg]:
        messages = decode_chunk(data)
        decoded.append(len(messages))
        return messages

    monkeypatch.setattr(checkpoints, "decode_chunk", counting)
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
    decoded: list[int] = []

    def counting(data: bytes | memoryview) -> list[Msg]:
        messages = decode_chunk(data)
        decoded.append(len(messages))
        return messages

    monkeypatch.setattr(checkpoints, "decode_chunk", counting)
    state, warnings = await journal.load_with_warnings(KEY)
    assert warnings == []
    assert state.version == head
    assert [m.id for m in state.context] == ids * 2
    assert decoded == [3]
