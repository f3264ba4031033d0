"""Checkpoints that name the records holding their messages (log spans).

With ``log_spans="always"``, and with ``"dense"`` on local segment files for
records that add two messages or more each, a checkpoint does not copy the context
into chunk blobs: each chunk is named as the records that added its messages. These
tests check that the messages are then stored once, that every load equals a full
replay whatever the history (restarts, tool results, compactions, whole-state
replacements, retention), that verify checks the spans, that a span is only ever
claimed for messages the records really add, and when each setting names one.
"""

from __future__ import annotations

import os
import random
import uuid
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import (
    ContextCleared,
    ContextCompacted,
    Journal,
    MessageAppended,
    Msg,
    SummarySet,
    ThreadKey,
    ToolCallCompleted,
    ToolCallRequested,
    ToolResultBlock,
    UnknownEvent,
    codec,
)
from journal.checkpoint import SPAN_MAX_RECORDS, SPAN_REWRITES, LogSpan, pack_chunk
from journal.engine.log import ThreadLog
from journal.engine.provenance import Provenance
from projections import AgentStateProjection, fold
from projections.agent_state import message_added
from stores.local import LocalStore

if TYPE_CHECKING:
    from pathlib import Path


class Clock:
    """A wall clock moved by hand (retention windows)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def new_key() -> ThreadKey:
    return ThreadKey("spans", f"s-{uuid.uuid4().hex[:10]}")


def say(i: int, role: str = "user") -> MessageAppended:
    # Ids that put a chunk boundary every few messages keep chunks small, so
    # a short thread has many of them.
    return MessageAppended(Msg(role, f"message {i} " + "x" * (i % 50), id=f"m-{i}"))


async def replayed(j: Journal, key: ThreadKey) -> bytes:
    records = [r async for r in j.records(key)]
    projection = AgentStateProjection(str(key))
    return msgspec.msgpack.encode(fold(projection, projection.initial(key), records))


async def refs_of(j: Journal, key: ThreadKey, version: int) -> list[str]:
    log = ThreadLog(j.store, key)
    return codec.decode_checkpoint(await log.read_checkpoint(version)).chunks


async def assert_right(j: Journal, key: ThreadKey, root: Path) -> None:
    """Every reader's load equals a full replay; verify finds nothing."""
    expected = await replayed(j, key)
    for reader in (Journal.open(root), Journal.open(root, segments=False), j):
        state, warnings = await reader.load_with_warnings(key)
        assert warnings == []
        assert msgspec.msgpack.encode(state) == expected
    report = await Journal.open(root).verify(key)
    assert report.problems == [], report
    assert report.warnings == [], report


def blob_bytes(root: Path) -> int:
    return sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, files in os.walk(root)
        if d.endswith("blobs")
        for f in files
    )


async def test_checkpoints_store_no_copy_of_the_messages(tmp_path: Path):
    key = new_key()
    j = Journal.open(tmp_path, checkpoint_every=20, log_spans="always")
    async with j.writer(key) as w:
        for i in range(400):
            await w.append([say(i)])
        await w.checkpoint()
    versions = await ThreadLog(j.store, key).checkpoint_versions()
    assert len(versions) >= 5
    for version in versions:
        refs = await refs_of(j, key, version)
        assert refs
        assert all(r.startswith("@") for r in refs), refs
    assert blob_bytes(tmp_path) == 0
    await assert_right(j, key, tmp_path)
    # Asked for none, checkpoints copy them, as before.
    files = Journal.open(tmp_path / "files", checkpoint_every=20, log_spans="never")
    async with files.writer(key) as w:
        for i in range(30):
            await w.append([say(i)])
        await w.checkpoint()
    last = (await ThreadLog(files.store, key).checkpoint_versions())[-1]
    assert not any(r.startswith("@") for r in await refs_of(files, key, last))


async def test_a_load_at_the_checkpoint_reads_each_record_once(tmp_path: Path):
    """The record a checkpoint covers was read by its last span: that read (its
    CRC-checked stored hash and epoch) tells the checkpoint is this log's, with no
    second read and parse of the record."""
    key = new_key()
    j = Journal.open(tmp_path, checkpoint_every=0, log_spans="always")
    async with j.writer(key) as w:
        for i in range(12):
            await w.append([say(i), say(i, "assistant")])
        await w.checkpoint()
    head = await j.head(key)
    assert head in await ThreadLog(j.store, key).checkpoint_versions()
    reader = Journal.open(tmp_path)
    asked: list[str] = []
    real_read = reader.store.read

    async def read(key_: str) -> tuple[bytes, str]:
        asked.append(key_)
        return await real_read(key_)

    reader.store.read = read  # type: ignore[method-assign]
    state, warnings = await reader.load_with_warnings(key)
    assert warnings == []
    assert state.version == head
    assert msgspec.msgpack.encode(state) == await replayed(j, key)
    assert not [k for k in asked if k.endswith(".rec")], asked
    # A writer resumes from it at the head's epoch.
    async with reader.writer(key) as w:
        assert w.base_version == head
        await w.append([say(99)])
    await assert_right(reader, key, tmp_path)


async def test_a_restarted_writer_names_the_same_spans(tmp_path: Path):
    key = new_key()
    j = Journal.open(tmp_path, checkpoint_every=0, log_spans="always")
    async with j.writer(key) as w:
        for i in range(40):
            await w.append([say(i)])
        first = await w.checkpoint()
        for i in range(40, 45):
            await w.append([say(i)])  # a tail the next writer replays
    before = await refs_of(j, key, first)
    again = Journal.open(tmp_path, checkpoint_every=0, log_spans="always")
    async with again.writer(key) as w:
        for i in range(45, 80):
            await w.append([say(i)])
        second = await w.checkpoint()
    after = await refs_of(j, key, second)
    # The chunks the first checkpoint closed are named alike; later ones are
    # spans too (traced through the replayed tail and the new commits).
    closed = before[:-1]
    assert after[: len(closed)] == closed
    assert all(r.startswith("@") for r in after)
    assert blob_bytes(tmp_path) == 0
    # An explicit checkpoint by a reader (no writer) traces them as well.
    async with again.writer(key) as w:
        await w.append([say(80)])
    version = await Journal.open(tmp_path, log_spans="always").checkpoint(key)
    assert all(r.startswith("@") for r in await refs_of(j, key, version))
    assert blob_bytes(tmp_path) == 0
    await assert_right(j, key, tmp_path)


async def test_tool_results_and_mixed_records(tmp_path: Path):
    key = new_key()
    j = Journal.open(tmp_path, checkpoint_every=0, log_spans="always")
    async with j.writer(key) as w:
        for i in range(30):
            call = f"c{i}"
            await w.append(
                [
                    say(3 * i, "assistant"),
                    ToolCallRequested(call, "search", {"q": i}),
                ]
            )
            await w.append(
                [
                    ToolCallCompleted(
                        call, f"out {i}", message_id=f"t-{i}", name="search"
                    ),
                    SummarySet(f"s{i}"),
                    say(3 * i + 1),
                    say(3 * i + 2, "assistant"),
                ]
            )
        version = await w.checkpoint()
    assert all(r.startswith("@") for r in await refs_of(j, key, version))
    state = await j.load(key)
    assert sum(m.role == "tool" for m in state.context) == 30
    await assert_right(j, key, tmp_path)


async def test_compaction_clear_and_replacement(tmp_path: Path):
    key = new_key()
    j = Journal.open(tmp_path, checkpoint_every=7, log_spans="always")
    async with j.writer(key) as w:
        for i in range(60):
            await w.append([say(i)])
        await w.append([ContextCompacted("sum", [f"m-{i}" for i in range(0, 40, 3)])])
        for i in range(60, 90):
            await w.append([say(i)])
        await w.checkpoint()
        await w.update("flag", lambda s: setattr(s, "shutdown_interrupted", True))
        for i in range(90, 120):
            await w.append([say(i)])
        await w.checkpoint()
        await w.append([ContextCleared("new topic")])
        for i in range(120, 150):
            await w.append([say(i)])
    await assert_right(j, key, tmp_path)
    again = Journal.open(tmp_path, checkpoint_every=7, log_spans="always")
    async with again.writer(key) as w:
        for i in range(150, 170):
            await w.append([say(i)])
        await w.checkpoint()
    await assert_right(j, key, tmp_path)


@pytest.mark.parametrize("seed", range(6))
async def test_random_histories_load_as_replayed(tmp_path: Path, seed: int):
    rng = random.Random(seed)  # noqa: S311 (test data)
    key = new_key()
    n = 0
    for _ in range(3):  # writers, one after the other
        j = Journal.open(
            tmp_path,
            checkpoint_every=rng.choice([0, 3, 10]),
            log_spans=rng.choice(["never", "dense", "always"]),
        )
        async with j.writer(key) as w:
            for _ in range(rng.randint(20, 60)):
                roll = rng.random()
                if roll < 0.05 and w.state.context:
                    ids = [m.id for m in w.state.context if rng.random() < 0.3]
                    await w.append([ContextCompacted("c", ids)])
                elif roll < 0.07:
                    await w.append([ContextCleared()])
                elif roll < 0.10:
                    await w.checkpoint()
                elif roll < 0.15:
                    await w.append([SummarySet(f"s{n}")])
                else:
                    events: list[object] = []
                    for _ in range(rng.randint(1, 4)):
                        n += 1
                        if rng.random() < 0.2:
                            events.append(
                                ToolCallCompleted(f"c{n}", f"o{n}", message_id=f"t{n}")
                            )
                        else:
                            events.append(say(n))
                    await w.append(events)
        await assert_right(j, key, tmp_path)


async def test_retention_copies_the_spans_it_would_cut(tmp_path: Path):
    key = new_key()
    clock = Clock()
    j = Journal(
        LocalStore(tmp_path), checkpoint_every=0, clock=clock, log_spans="always"
    )
    w = await j.acquire(key)
    for i in range(50):
        await w.append([say(i)])
    old = await w.checkpoint()
    clock.now += 8 * 24 * 3600
    for i in range(50, 70):
        await w.append([say(i)])
    newer = await w.checkpoint()  # still names records below `old`
    assert any(LogSpan.parse(r).first < old for r in await refs_of(j, key, newer))
    marker = await j.retain(key)
    assert marker is not None
    assert marker.checkpoint == old
    for version in (old, newer):
        refs = await refs_of(j, key, version)
        assert not any(r.startswith("@") and LogSpan.parse(r).first < old for r in refs)
    assert blob_bytes(tmp_path) > 0
    # The writer, alive all along, names nothing retention removed.
    for i in range(70, 90):
        await w.append([say(i)])
    latest = await w.checkpoint()
    refs = await refs_of(j, key, latest)
    assert not any(r.startswith("@") and LogSpan.parse(r).first < old for r in refs)
    await w.close()
    expected_texts = [f"message {i} " + "x" * (i % 50) for i in range(90)]
    for reader in (Journal.open(tmp_path), j):
        state, warnings = await reader.load_with_warnings(key)
        assert warnings == []
        assert [m.text for m in state.context] == expected_texts
    report = await Journal.open(tmp_path).verify(key)
    assert report.problems == [], report


async def test_encrypted_and_compressed_journals(tmp_path: Path):
    pytest.importorskip("zstandard")
    key = new_key()
    j = Journal.open(
        tmp_path, checkpoint_every=10, compression="zstd", log_spans="always"
    )
    async with j.writer(key) as w:
        for i in range(60):
            await w.append([say(i)])
    last = (await ThreadLog(j.store, key).checkpoint_versions())[-1]
    assert all(r.startswith("@") for r in await refs_of(j, key, last))
    await assert_right(j, key, tmp_path)


def test_provenance_claims_only_contiguous_records():
    p = Provenance()
    a = [Msg("user", f"a{i}") for i in range(3)]
    b = [Msg("user", f"b{i}") for i in range(2)]
    c = [Msg("user", "c")]
    p.observe(1, a)
    p.observe(2, [])
    p.observe(3, b)
    p.observe(5, c)  # version 4 was never seen
    digest = "0" * 64
    assert p.span(a[1:] + b, digest) == LogSpan(1, 1, 3, 4, digest)
    assert p.span(a + b[:1], digest) == LogSpan(1, 0, 3, 4, digest)
    assert p.span([a[0], a[2]], digest) is None  # a message left out
    assert p.span(a[:2] + b, digest) is None  # a[2] left out at the end of 1
    assert p.span(b + c, digest) is None  # version 4 unknown
    assert p.span([b[1], b[0]], digest) is None  # out of order
    copy = msgspec.structs.replace(a[0])
    assert copy == a[0]
    assert p.span([copy, a[1]], digest) is None  # equal is not the same message
    p.forget_before(3)
    assert p.span(a, digest) is None
    assert p.span(b, digest) == LogSpan(3, 0, 3, 2, digest)


def test_span_references_parse_strictly():
    digest = pack_chunk([Msg("user", "x")])[0]
    span = LogSpan(7, 2, 9, 5, digest)
    assert LogSpan.parse(span.ref()) == span
    assert LogSpan.parse(digest) is None
    for bad in (
        f"@7.2.9.5.{digest[:-1]}",
        f"@7.2.6.5.{digest}",  # ends before it starts
        f"@0.2.9.5.{digest}",
        f"@7.2.9.0.{digest}",
        f"@07.2.9.5.{digest}",
        f"@7.2.9.5.{digest.upper()}",
        f"@7.2.9.5.{digest}\n",
        "@",
    ):
        with pytest.raises(ValueError, match="log span"):
            LogSpan.parse(bad)


def test_message_added_agrees_with_the_fold():
    projection = AgentStateProjection("t")
    key = ThreadKey("a", "s")
    record = codec.Record(1, 1, "w", "b", None, 0.0, "", "", [])
    samples: list[object] = [
        say(1),
        ToolCallCompleted("c", "out", message_id="t1", name="n"),
        ToolCallCompleted("c", "out"),  # schema 1: no message
        ToolCallRequested("c", "n"),
        SummarySet("s"),
        ContextCleared(),
    ]
    for event in samples:
        state = projection.initial(key)
        state.context.append(Msg("user", "before"))
        state = projection.apply(state, record, event)
        added = message_added(event)
        if added is None:
            assert len(state.context) <= 1
        else:
            assert state.context[-1] == added


async def test_dense_names_spans_of_dense_records_on_local_segments(tmp_path: Path):
    """``"dense"``: spans where records add two messages or more each, blobs else.

    A span is read back at a decode per record: an agent run's records (one
    message each) load faster from blobs; a turn appended as one record of
    several messages is cheap to read back from the log.
    """
    sparse, dense = new_key(), new_key()
    j = Journal.open(tmp_path, checkpoint_every=0, log_spans="dense")
    async with j.writer(sparse) as w:
        for i in range(100):
            await w.append([say(i)])
        sparse_at = await w.checkpoint()
    async with j.writer(dense) as w:
        for i in range(0, 200, 2):
            await w.append([say(i), say(i + 1, "assistant")])
        dense_at = await w.checkpoint()
    assert not any(r.startswith("@") for r in await refs_of(j, sparse, sparse_at))
    refs = await refs_of(j, dense, dense_at)
    spans = [s for r in refs if (s := LogSpan.parse(r)) is not None]
    # All but a chunk cut down to one message of one record (below the density).
    assert sum(s.count for s in spans) >= 190, refs
    assert all(s.count >= 1.5 * (s.last - s.first + 1) for s in spans), spans
    for key in (sparse, dense):
        await assert_right(j, key, tmp_path)
    # Off local segment files, "dense" names none.
    memory = Journal.open(
        f"memory://spans-{uuid.uuid4().hex}", checkpoint_every=0, log_spans="dense"
    )
    async with memory.writer(dense) as w:
        for i in range(0, 40, 2):
            await w.append([say(i), say(i + 1, "assistant")])
        at = await w.checkpoint()
    assert not any(r.startswith("@") for r in await refs_of(memory, dense, at))


async def test_always_names_spans_on_any_store_and_never_on_none():
    key = new_key()
    for setting, expect_spans in (("always", True), ("never", False)):
        j = Journal.open(f"memory://spans-{uuid.uuid4().hex}", log_spans=setting)
        async with j.writer(key) as w:
            for i in range(40):
                await w.append([say(i)])
            at = await w.checkpoint()
        refs = await refs_of(j, key, at)
        assert refs
        assert all(r.startswith("@") == expect_spans for r in refs), refs
        state, warnings = await j.load_with_warnings(key)
        assert warnings == []
        assert msgspec.msgpack.encode(state) == await replayed(j, key)


def test_log_spans_setting_is_checked(tmp_path: Path):
    for bad in ("sometimes", "", "auto", "DENSE"):
        with pytest.raises(ValueError, match="log_spans must be one of"):
            Journal.open(tmp_path, log_spans=bad)
        with pytest.raises(ValueError, match="log_spans must be one of"):
            Journal(LocalStore(tmp_path), log_spans=bad)


def test_provenance_density():
    p = Provenance()
    one = [[Msg("user", f"x{v}")] for v in range(4)]
    for v, messages in enumerate(one, 1):
        p.observe(v, messages)
    chunk = [m for ms in one for m in ms]
    digest = "0" * 64
    assert p.span(chunk, digest) == LogSpan(1, 0, 4, 4, digest)
    assert p.span(chunk, digest, min_density=1.5) is None
    assert p.span(chunk, digest, min_density=1.0) is not None


async def test_the_default_is_dense_and_stops_at_a_segment(tmp_path: Path):
    """By default: spans for dense records while the thread fits one log segment.

    Past :data:`SPAN_MAX_RECORDS` records its checkpoints name no new span and copy
    the chunks named as spans into blobs, at most :data:`SPAN_REWRITES` a
    checkpoint, until none is left, so that a long thread loads without decoding its
    records; loads stay right throughout.
    """
    key = new_key()
    j = Journal.open(tmp_path, checkpoint_every=0)
    async with j.writer(key) as w:
        for i in range(0, 400, 4):
            await w.append([say(i + k) for k in range(4)])
        short = await w.checkpoint()
        assert short <= SPAN_MAX_RECORDS
        spans = [s for r in await refs_of(j, key, short) if (s := LogSpan.parse(r))]
        assert sum(s.count for s in spans) >= 390
        assert blob_bytes(tmp_path) == 0
        i = 400
        while w.version <= SPAN_MAX_RECORDS - 10:
            await w.append([say(i + k) for k in range(4)])
            i += 4
        spans = [r for r in await refs_of(j, key, await w.checkpoint()) if r[0] == "@"]
        assert len(spans) > 2 * SPAN_REWRITES, "the test needs several rewrites"
        before = set(spans)
        rounds = 0
        while spans:
            for _ in range(20):
                await w.append([say(i + k) for k in range(4)])
                i += 4
            assert w.version > SPAN_MAX_RECORDS
            refs = await refs_of(j, key, await w.checkpoint())
            now = [r for r in refs if r[0] == "@"]
            assert set(now) <= before, "a span named past the limit"
            # Eight copied, and the open last chunk may have grown into a new one.
            gone = len(spans) - len(now)
            assert min(SPAN_REWRITES, len(spans)) <= gone <= SPAN_REWRITES + 1
            spans = now
            rounds += 1
            await assert_right(j, key, tmp_path)
        assert rounds <= -(-len(before) // SPAN_REWRITES)
        # Past the limit the writer stops learning where messages came from.
        refs = w._refs
        assert refs is not None
        assert len(refs.provenance) == 0
        await w.append([say(i + k) for k in range(4)])
        assert len(refs.provenance) == 0
    assert blob_bytes(tmp_path) > 0
    await assert_right(j, key, tmp_path)


class Noted(MessageAppended, frozen=True):
    """An application's event that adds a message (a MessageAppended subclass)."""

    note: str = ""


async def test_records_the_quick_read_passes_on_load_as_replayed(tmp_path: Path):
    # A span's records are read without building Record objects, except those that
    # need the general path: a message event kept in a blob, one at an older schema
    # (upcast on read), an application's subclass. Each must load as replayed.
    key = new_key()
    codec.register_event(Noted, name="test.Noted", schema=1)
    try:
        j = Journal.open(tmp_path, checkpoint_every=0, log_spans="always")
        async with j.writer(key) as w:
            await w.append([say(1), Noted(Msg("user", "old", id="n-1"), note="a")])
            big = "y" * (codec.BLOB_THRESHOLD + 1)
            await w.append([say(2), MessageAppended(Msg("tool", big, id="big"))])

        def renamed(fields: dict[str, object]) -> dict[str, object]:
            message = dict(fields["message"])  # type: ignore[call-overload]
            message["id"] = f"{message['id']}-v2"
            return {**fields, "message": message}

        codec.register_event(Noted, name="test.Noted", schema=2)
        codec.register_upcaster("test.Noted", 1, renamed)
        j = Journal.open(tmp_path, checkpoint_every=0, log_spans="always")
        async with j.writer(key) as w:
            await w.append([Noted(Msg("user", "new", id="n-2")), say(3)])
            version = await w.checkpoint()
        assert all(r.startswith("@") for r in await refs_of(j, key, version))
        state = await Journal.open(tmp_path).load(key)
        expected = ["m-1", "n-1-v2", "m-2", "big", "n-2", "m-3"]
        assert [m.id for m in state.context] == expected
        await assert_right(j, key, tmp_path)
    finally:
        codec.unregister_event("test.Noted")


def _encoded(
    version: int, prev_hash: bytes, events: list[object], batch_id: str = ""
) -> codec.EncodedRecord:
    return codec.encode_record(
        version=version,
        epoch=3,
        writer="w",
        batch_id=batch_id or f"b{version}",
        run_id=None,
        committed_at=float(version),
        prev_hash=prev_hash,
        events=events,
    )


def _span_raws(count: int) -> tuple[list[bytes], list[codec.EncodedRecord]]:
    prev, raws, encoded = codec.GENESIS_HASH, [], []
    for v in range(1, count + 1):
        record = _encoded(
            v,
            prev,
            [
                MessageAppended(Msg("user", f"q{v}")),
                SummarySet(f"s{v}"),
                ToolCallCompleted(f"c{v}", f"o{v}", message_id=f"t{v}", name="n"),
            ],
        )
        raws.append(record.data)
        encoded.append(record)
        prev = record.hash
    return raws, encoded


@pytest.mark.parametrize("as_views", [False, True], ids=["bytes", "views"])
def test_parse_messages_reads_each_records_chain_fields_and_messages(as_views):
    raws, encoded = _span_raws(4)
    if as_views:
        whole = memoryview(b"".join(raws))
        starts = [sum(map(len, raws[:i])) for i in range(len(raws))]
        given: list[bytes | memoryview] = [
            whole[s : s + len(r)] for s, r in zip(starts, raws, strict=True)
        ]
    else:
        given = list(raws)
    messages: list[Msg] = [Msg("user", "before")]
    ends: list[int] = []
    run = codec.parse_messages(given, 1, label="t", messages=messages, ends=ends)
    assert run == codec.SpanRun(4, encoded[0].prev_hash, encoded[3].hash, 3, False)
    assert type(run.hash) is bytes  # not a view keeping the segment's buffer
    # Appended after what the list held, each record's end noted.
    assert ends == [3, 5, 7, 9]
    assert [m.content for m in messages[1:3]] == ["q1", [ToolResultBlock("c1", "o1")]]
    assert [m.content for m in messages[7:]] == ["q4", [ToolResultBlock("c4", "o4")]]
    # A flipped byte in the third record's body is named by its version.
    damaged = bytearray(raws[2])
    damaged[len(damaged) // 2] ^= 1
    with pytest.raises(codec.CorruptRecordError) as caught:
        codec.parse_messages(
            [raws[0], raws[1], bytes(damaged)], 1, label="t", messages=[], ends=[]
        )
    assert caught.value.version == 3


def test_parse_messages_stops_where_the_chain_breaks_or_the_general_path_starts():
    raws, encoded = _span_raws(4)
    # Record 3 from another chain: whole, but its prev_hash is not record 2's hash.
    other_3 = _encoded(
        3, b"\x01" * 32, [MessageAppended(Msg("user", "elsewhere"))]
    ).data
    messages: list[Msg] = []
    ends: list[int] = []
    run = codec.parse_messages(
        [raws[0], raws[1], other_3, raws[3]], 1, label="t", messages=messages, ends=ends
    )
    assert (run.read, run.broken, run.hash) == (2, True, encoded[1].hash)
    assert ends == [2, 4]  # nothing of record 3 was added
    # A record of a type this process does not know: read up to it, not broken.
    unknown = _encoded(
        2,
        encoded[0].hash,
        [UnknownEvent("NotRegistered", 1, False, msgspec.msgpack.encode({}))],
        batch_id="u",
    ).data
    ends = []
    run = codec.parse_messages(
        [raws[0], unknown, raws[2]], 1, label="t", messages=[], ends=ends
    )
    assert (run.read, run.broken, ends) == (1, False, [2])
    # Nothing readable at all: an empty run.
    run = codec.parse_messages([unknown], 2, label="t", messages=[], ends=[])
    assert run == codec.SpanRun(0, b"", b"", 0, False)
