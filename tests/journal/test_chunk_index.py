"""Chunk index blobs: a long chunk list is stored once, not once per checkpoint."""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey, codec
from journal.checkpoint import LogSpan
from journal.chunk_index import (
    INDEX_MAX_REFS,
    INDEX_MIN_REFS,
    MAX_CHUNK_REFS,
    decode_index,
    pack_refs,
    parse_index_ref,
)
from journal.engine import checkpoints
from journal.engine.log import ThreadLog
from journal.layout import ThreadLayout
from stores.testing.journal_contract.base import chunk_ending_ids

if TYPE_CHECKING:
    from collections.abc import Sequence

KEY = ThreadKey("agent", "index", "main")


def _digest(rng: random.Random) -> str:
    return rng.randbytes(32).hex()


def _expand(refs: list[str], blobs: dict[str, bytes]) -> list[str]:
    """What a reader does (journal.engine.checkpoints.expand_refs), from a dict."""
    while any(r.startswith("#") for r in refs):
        flat: list[str] = []
        for ref in refs:
            parsed = parse_index_ref(ref)
            if parsed is None:
                flat.append(ref)
            else:
                level, digest = parsed
                data = blobs[digest]
                assert hashlib.sha256(data).hexdigest() == digest
                flat += decode_index(data, level)
        refs = flat
    return refs


# --- the pure grouping -------------------------------------------------------------


def test_a_short_list_is_stored_as_it_is():
    rng = random.Random(1)  # noqa: S311 - test data, not secrets
    refs = [_digest(rng) for _ in range(INDEX_MIN_REFS - 1)]
    assert pack_refs(refs) == (refs, [])


@pytest.mark.parametrize("seed", range(8))
def test_grouping_round_trips_and_keeps_spans_in_place(seed: int):
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    refs: list[str] = []
    for _ in range(rng.randrange(INDEX_MIN_REFS, 3000)):
        if rng.random() < 0.02:
            refs.append(f"@{rng.randrange(1, 99)}.0.100.3.{_digest(rng)}")
        else:
            refs.append(_digest(rng))
    stored, blobs = pack_refs(refs)
    assert _expand(stored, dict(blobs)) == refs
    # Spans stay in the checkpoint, in order; no index holds one.
    assert [r for r in stored if r.startswith("@")] == [
        r for r in refs if r.startswith("@")
    ]
    for _, data in blobs:
        assert not any(r.startswith("@") for r in msgspec.msgpack.decode(data))
    assert len(stored) < len(refs)


def test_appending_chunks_leaves_the_earlier_index_blobs_as_they_were():
    """The property that makes a checkpoint cost what changed since the last one."""
    rng = random.Random(7)  # noqa: S311 - test data, not secrets
    refs = [_digest(rng) for _ in range(INDEX_MIN_REFS)]
    seen: set[str] = set()
    new_per_step: list[int] = []
    flat_bytes = stored_bytes = 0
    for _ in range(40):
        refs += [_digest(rng) for _ in range(20)]
        stored, blobs = pack_refs(refs)
        new = {d for d, _ in blobs} - seen
        new_per_step.append(len(new))
        seen |= new
        flat_bytes += len(msgspec.msgpack.encode(refs))
        stored_bytes += len(msgspec.msgpack.encode(stored))
    # 20 new chunks complete about 20 / 16 groups; a level-2 group now and then.
    assert max(new_per_step) <= 8, new_per_step
    assert sum(new_per_step) < len(refs) // 4
    # The stored lists no longer grow with the thread: a tenth of the flat ones'.
    assert stored_bytes * 10 < flat_bytes
    assert len(stored) < INDEX_MIN_REFS


def test_a_run_without_a_boundary_is_cut_at_the_most_an_index_holds():
    # Digests ending in 0x01 never end a group.
    refs = [f"{i:062x}01" for i in range(INDEX_MAX_REFS * 2 + 5)]
    stored, blobs = pack_refs(refs)
    assert [len(decode_index(b, 1)) for _, b in blobs] == [INDEX_MAX_REFS] * 2
    assert stored[2:] == refs[-5:]
    assert _expand(stored, dict(blobs)) == refs


@pytest.mark.parametrize(
    "ref",
    ["#", "#0" + "a" * 64, "#5" + "a" * 64, "#1" + "A" * 64, "#1" + "a" * 63, "#1x"],
)
def test_a_malformed_index_reference_is_refused(ref: str):
    with pytest.raises(ValueError, match="malformed chunk index reference"):
        parse_index_ref(ref)


def test_a_blob_or_span_reference_is_not_an_index():
    assert parse_index_ref("a" * 64) is None
    assert parse_index_ref("@1.0.2.3." + "a" * 64) is None
    assert parse_index_ref("#2" + "b" * 64) == (2, "b" * 64)


@pytest.mark.parametrize(
    ("data", "level", "match"),
    [
        (b"\x90", 1, "holds 0 references"),
        (msgspec.msgpack.encode(["a" * 64] * (INDEX_MAX_REFS + 1)), 1, "holds 65"),
        (b"\xc1", 1, "does not decode"),
        (msgspec.msgpack.encode([1, 2]), 1, "does not decode"),
        (msgspec.msgpack.encode(["A" * 64]), 1, "holds the reference"),
        # A level-1 index names chunks, never other indexes or spans.
        (msgspec.msgpack.encode(["#1" + "a" * 64]), 1, "holds the reference"),
        (msgspec.msgpack.encode(["@1.0.2.3." + "a" * 64]), 1, "holds the reference"),
        # Each level names the level below it only: no index can name itself.
        (msgspec.msgpack.encode(["#2" + "a" * 64]), 2, "holds the reference"),
        (msgspec.msgpack.encode(["a" * 64]), 2, "holds the reference"),
    ],
)
def test_a_malformed_index_blob_is_refused(data: bytes, level: int, match: str):
    with pytest.raises(ValueError, match=match):
        decode_index(data, level)


# --- on disk ----------------------------------------------------------------------


async def _long_thread(root: str, messages: int, every: int) -> list[str]:
    """A thread of one-message records and a checkpoint every ``every`` records.

    Its ids are the same every run: the counts of index groups asserted below follow
    from the chunks' digests. With random ids, the newest checkpoint kept 64
    references or more in about one run in 50 (2.2% of 2,000 simulated chunk lists:
    a long run of references after the last group boundary stays ungrouped).
    """
    ids = chunk_ending_ids(messages, seed=16)
    j = Journal.open(root, fsync=False, checkpoint_every=0, log_spans="never")
    async with j.writer(KEY) as w:
        for n, mid in enumerate(ids, 1):
            await w.append([MessageAppended(Msg("user", f"message {n}", id=mid))])
            if n % every == 0:
                await w.checkpoint()
    await j.aclose()
    return ids


async def _checkpoint_bodies(j: Journal) -> list[codec.CheckpointBody]:
    layout = ThreadLayout.of(KEY)
    keys = await j.store.list(layout.checkpoint_dir)
    return [
        codec.decode_checkpoint(data)
        for data in await j.store.read_many(sorted(keys))
        if data is not None
    ]


async def test_a_long_threads_checkpoints_share_their_chunk_list(tmp_path):
    """Fails with flat chunk lists: the newest checkpoint named all 400 chunks."""
    root = str(tmp_path)
    ids = await _long_thread(root, 400, 25)
    async with Journal.open(root) as j:
        state, warnings = await j.load_with_warnings(KEY)
        assert warnings == []
        assert [m.id for m in state.context] == ids
        bodies = await _checkpoint_bodies(j)
        assert len(bodies) == 16
        newest = bodies[-1]
        assert newest.message_count == 400
        assert len(newest.chunks) < INDEX_MIN_REFS
        assert any(r.startswith("#") for r in newest.chunks)
        # Each chunk digest is stored in about one index blob, not once per
        # checkpoint: 400 chunks, ~25 level-1 groups (and a few of level 2).
        indexes = await j.store.list(ThreadLayout.of(KEY).index_dir)
        assert 0 < len(indexes) < 60
        report = await j.verify(KEY)
        assert report.ok, report.problems
        assert report.warnings == []
        assert report.checkpoints == 16
        # A load at an older checkpoint reads its own, older, index blobs.
        past = await j.load(KEY, at_version=201)  # version 1 opens the thread
        assert [m.id for m in past.context] == ids[:200]


@pytest.mark.parametrize("damage", ["missing", "replaced"])
async def test_a_missing_or_damaged_index_blob_makes_loads_skip_the_checkpoint(
    tmp_path, damage: str
):
    root = str(tmp_path)
    ids = await _long_thread(root, 200, 100)
    async with Journal.open(root) as j:
        # The older checkpoint's first group: the newer one names it too, at
        # level 1 or (when its list still held 64 references after grouping)
        # inside a level-2 index; the newer one's first index reference is that
        # level-2 blob then, which the older one does not name.
        (older, _) = await _checkpoint_bodies(j)
        ref = next(r for r in older.chunks if r.startswith("#1"))
        index_key = ThreadLayout.of(KEY).index_key(ref[2:])
        assert await j.store.delete(index_key)
        if damage == "replaced":
            # Another index's bytes under this digest: a valid index, the wrong one.
            await j.store.create(index_key, msgspec.msgpack.encode(["0" * 64]))
        state, warnings = await j.load_with_warnings(KEY)
        assert [m.id for m in state.context] == ids  # from the log, in full
        # The first group is the older checkpoint's too: both are skipped.
        assert len(warnings) == 2
        assert "checkpoint 201 is corrupt" in warnings[0]
        assert "checkpoint 101 is corrupt" in warnings[1]
        report = await j.verify(KEY)
        if damage == "missing":
            assert all("chunk index is missing" in w for w in warnings)
            # Derived data written unsynced: a power cut can lose it. A warning,
            # as for a missing chunk, not a problem.
            assert report.ok, report.problems
            assert any("lacks a chunk index" in str(w) for w in report.warnings)
        else:
            assert all("does not match its hash" in w for w in warnings)
            assert not report.ok
            assert any("chunk index is unusable" in str(p) for p in report.problems)


async def test_a_hostile_index_reference_is_refused(tmp_path):
    """A checkpoint naming a malformed index reference is skipped, not followed."""
    root = str(tmp_path)
    ids = await _long_thread(root, 100, 100)
    async with Journal.open(root) as j:
        layout = ThreadLayout.of(KEY)
        (body,) = await _checkpoint_bodies(j)
        hostile = msgspec.structs.replace(body, chunks=["#9" + "a" * 64])
        assert body.version == 101  # version 1 opens the thread
        await j.store.delete(layout.checkpoint_key(101))
        await j.store.create(
            layout.checkpoint_key(101), codec.encode_checkpoint(hostile)
        )
        state, warnings = await j.load_with_warnings(KEY)
        assert [m.id for m in state.context] == ids
        assert len(warnings) == 1
        assert "malformed chunk index reference" in warnings[0]


async def _plant_index_bomb(
    j: Journal, levels: int, **claims: object
) -> codec.CheckpointBody:
    """Replace the thread's one checkpoint by one naming ``levels`` index blobs of
    64 references, each naming the one below 64 times, over its first chunk."""
    layout = ThreadLayout.of(KEY)
    (body,) = await _checkpoint_bodies(j)
    ref = (await j.store.list(layout.blob_dir))[0].rsplit("/", 1)[-1]
    for level in range(1, levels + 1):
        data = msgspec.msgpack.encode([ref] * INDEX_MAX_REFS)
        digest = hashlib.sha256(data).hexdigest()
        await j.store.create(layout.index_key(digest), data)
        ref = f"#{level}{digest}"
    bomb = msgspec.structs.replace(body, chunks=[ref], **claims)
    await j.store.delete(layout.checkpoint_key(body.version))
    await j.store.create(
        layout.checkpoint_key(body.version), codec.encode_checkpoint(bomb)
    )
    return bomb


async def test_indexes_naming_more_chunks_than_the_checkpoint_holds_are_refused(
    tmp_path, monkeypatch
):
    """Fails without a bound on the expansion: three index blobs of 64 references,
    each naming the one below 64 times, stood for 64**3 references, and the load
    decoded the one chunk they name that many times before it could count."""
    root = str(tmp_path)
    ids = await _long_thread(root, 100, 100)
    async with Journal.open(root) as j:
        await _plant_index_bomb(j, 3)
        decoded = []
        real = checkpoints.decode_chunk
        monkeypatch.setattr(
            checkpoints, "decode_chunk", lambda raw: decoded.append(1) or real(raw)
        )
        state, warnings = await j.load_with_warnings(KEY)
        assert [m.id for m in state.context] == ids  # replayed from the log
        assert len(warnings) == 1
        assert "more than the checkpoint's 100 messages" in warnings[0]
        assert decoded == []
        report = await j.verify(KEY)
        assert not report.ok
        assert any(
            "chunk index is unusable" in str(p) and "more than" in str(p)
            for p in report.problems
        )


async def test_indexes_standing_for_millions_are_refused_whatever_count_is_claimed(
    tmp_path, monkeypatch
):
    """Fails when only the checkpoint's own message count bounds the expansion: four
    index blobs of 64 references, each naming the one below 64 times, under a
    checkpoint claiming 2**40 messages, stood for 64**4 (16.7 million) references,
    which the load built and then began decoding the one chunk for."""
    root = str(tmp_path)
    ids = await _long_thread(root, 100, 100)
    async with Journal.open(root) as j:
        await _plant_index_bomb(j, 4, message_count=2**40)

        def decode_chunk(raw: bytes) -> object:
            raise AssertionError("a chunk was decoded for the hostile checkpoint")

        monkeypatch.setattr(checkpoints, "decode_chunk", decode_chunk)
        state, warnings = await j.load_with_warnings(KEY)
        assert [m.id for m in state.context] == ids  # replayed from the log
        assert len(warnings) == 1
        assert f"more than the {MAX_CHUNK_REFS} a checkpoint may name" in warnings[0]
        report = await j.verify(KEY)
        assert not report.ok
        assert any(
            "chunk index is unusable" in str(p) and "may name" in str(p)
            for p in report.problems
        )


async def test_retention_keeps_what_the_retained_checkpoints_index_names(tmp_path):
    root = str(tmp_path)
    ids = await _long_thread(root, 300, 100)
    async with Journal.open(root) as j:
        marker = await j.retain(KEY, window=0)
        assert marker is not None
        assert marker.checkpoint == 301  # version 1 opens the thread
        assert await j.first_version(KEY) == 301
        state, warnings = await j.load_with_warnings(KEY)
        assert warnings == []
        assert [m.id for m in state.context] == ids
        report = await j.verify(KEY)
        assert report.ok, report.problems


async def test_indexes_log_spans_and_retention_mix_in_one_list(tmp_path):
    """Retention rewrites the spans of a checkpoint whose other chunks are indexed.

    With ``log_spans="always"`` every chunk starts as a log span; the first
    retention turns the spans below it into blobs, which the next checkpoint
    groups into index blobs while its newer chunks stay spans; the second
    retention then rewrites those spans in a checkpoint that also names indexes.
    """
    root = str(tmp_path)
    ids = chunk_ending_ids(300)
    j = Journal.open(root, fsync=False, checkpoint_every=0, log_spans="always")
    async with j:
        async with j.writer(KEY) as w:
            for n, mid in enumerate(ids[:150], 1):
                await w.append([MessageAppended(Msg("user", f"m{n}", id=mid))])
            await w.checkpoint()
        assert (await j.retain(KEY, window=0)) is not None
        async with j.writer(KEY) as w:
            for n, mid in enumerate(ids[150:], 151):
                await w.append([MessageAppended(Msg("user", f"m{n}", id=mid))])
            mixed = await w.checkpoint()
        newest = (await _checkpoint_bodies(j))[-1]
        assert newest.version == mixed
        kinds = {r[0] if r[0] in "#@" else "blob" for r in newest.chunks}
        assert kinds == {"#", "@", "blob"} or kinds == {"#", "@"}, newest.chunks
        marker = await j.retain(KEY, window=0)
        assert marker is not None
        assert marker.checkpoint == mixed
        rewritten = (await _checkpoint_bodies(j))[-1]
        spans = [LogSpan.parse(r) for r in rewritten.chunks if r.startswith("@")]
        # Only the span of the retained record itself may remain (nothing below).
        assert len(spans) < 3, rewritten.chunks
        assert all(s is not None and s.first >= mixed for s in spans)
        assert any(r.startswith("#") for r in rewritten.chunks)
    async with Journal.open(root) as reader:
        state, warnings = await reader.load_with_warnings(KEY)
        assert warnings == []
        assert [m.id for m in state.context] == ids
        report = await reader.verify(KEY)
        assert report.ok, report.problems


async def test_a_reopened_writer_does_not_put_the_index_blobs_again(
    tmp_path, monkeypatch
):
    """Its first checkpoint writes only the groups completed since the last one."""
    root = str(tmp_path)
    ids = await _long_thread(root, 400, 25)
    puts: list[str] = []
    put_blobs = ThreadLog.put_blobs

    async def recording(
        self: ThreadLog,
        blobs: Sequence[tuple[str, bytes]],
        *,
        derived: bool = False,
        index: bool = False,
        limit: int | None = None,
    ) -> None:
        if index:
            puts.extend(digest for digest, _ in blobs)
        await put_blobs(self, blobs, derived=derived, index=index, limit=limit)

    monkeypatch.setattr(ThreadLog, "put_blobs", recording)
    j = Journal.open(root, fsync=False, checkpoint_every=0, log_spans="never")
    async with j, j.writer(KEY) as w:
        more = chunk_ending_ids(3)
        for n, mid in enumerate(more, 401):
            await w.append([MessageAppended(Msg("user", f"message {n}", id=mid))])
        await w.checkpoint()
        indexes = await j.store.list(ThreadLayout.of(KEY).index_dir)
        assert len(indexes) > 10  # the thread's groups, all there before
        # Three chunks more complete at most one level-1 group, and with it
        # perhaps one group of each level above it.
        assert len(puts) <= 4, puts
        state = await j.load(KEY)
        assert [m.id for m in state.context] == ids + more
