"""When a writer checkpoints on its own: after the interval, at a chunk boundary."""

from __future__ import annotations

import uuid

import pytest

from journal import Journal, MessageAppended, Msg, SummarySet, ThreadKey
from journal.checkpoint import (
    FORCED_AFTER,
    OPEN_RUN_SLACK,
    CheckpointPolicy,
    ChunkEncoder,
    decode_chunk,
    ends_chunk,
    open_run,
)
from journal.engine.log import ThreadLog


def _ids(boundary: bool, n: int) -> list[str]:
    """``n`` message ids that are (or are not) chunk boundaries."""
    out: list[str] = []
    while len(out) < n:
        candidate = uuid.uuid4().hex
        if ends_chunk(candidate) == boundary:
            out.append(candidate)
    return out


def _msgs(ids: list[str]) -> list[Msg]:
    return [Msg("user", f"m{i}", id=i) for i in ids]


def test_open_run_counts_the_messages_after_the_last_boundary():
    plain, edge = _ids(False, 9), _ids(True, 1)
    assert open_run([], 4) == 0
    assert open_run(_msgs(edge), 4) == 0
    assert open_run(_msgs(edge + plain[:3]), 4) == 3
    assert open_run(_msgs(edge + plain), 4) == 5  # capped at limit + 1
    assert open_run(_msgs(plain[:2]), 4) == 2  # no boundary: all of them are open


def test_due_waits_for_a_boundary_but_not_forever():
    policy = CheckpointPolicy(10)
    open_ctx = _msgs(_ids(True, 1) + _ids(False, OPEN_RUN_SLACK + 1))
    closed_ctx = _msgs(_ids(False, 7) + _ids(True, 1))
    assert not policy.due(9, 0, closed_ctx)  # before the interval
    assert policy.due(10, 0, closed_ctx)
    assert not policy.due(10, 0, open_ctx)
    assert not policy.due(19, 0, open_ctx)
    assert not policy.due(20, 0, open_ctx)  # twice the interval: still waiting
    assert not policy.due(10 * FORCED_AFTER - 1, 0, open_ctx)
    assert policy.due(10 * FORCED_AFTER, 0, open_ctx)  # then regardless
    assert policy.due(10, 0)  # no context given: the plain interval
    assert not CheckpointPolicy(0).due(1000, 0, closed_ctx)
    with pytest.raises(ValueError, match="every"):
        CheckpointPolicy(-1)


async def test_automatic_checkpoints_leave_next_to_nothing_open(tmp_path):
    """Automatic checkpoints come at least the interval apart, and one that was not
    forced (at FORCED_AFTER times the interval) leaves at most OPEN_RUN_SLACK
    messages in a partly filled last chunk. (A checkpoint still being written
    when the next is due delays that one, so gaps may exceed FORCED_AFTER
    intervals.)"""
    # On disk, each append waits for a worker thread, and so lets the background
    # checkpoint run as it would between the turns of a real agent.
    j = Journal.open(str(tmp_path), fsync=False, checkpoint_every=20)
    key = ThreadKey("agent", "policy", "main")
    contexts: dict[int, list[Msg]] = {}
    async with j.writer(key) as w:
        for i in range(1500):
            events: list[object] = [
                MessageAppended(Msg("user", f"turn {i}.{n}", id=f"m-{i}-{n}"))
                for n in range(i % 7)
            ]
            if i % 7 == 0:
                events.append(SummarySet(f"summary {i}"))  # a record without messages
            await w.append(events)
            contexts[w.version] = list(w.state.context)
        await w.checkpoint()  # waits for the background one too
    versions = await ThreadLog(j.store, key).checkpoint_versions()
    automatic = versions[:-1]
    # How many there are depends on how fast the background writes finish.
    assert len(automatic) >= 10, versions
    previous, waited = 0, 0
    for version in automatic:
        gap = version - previous
        assert gap >= 20, versions
        if gap < 20 * FORCED_AFTER:
            waited += 1
            context = contexts[version]
            assert open_run(context, OPEN_RUN_SLACK) <= OPEN_RUN_SLACK
            # The chunker agrees: its last chunk is closed or holds that few.
            last = ChunkEncoder().chunk(context)[-1][1]
            assert ends_chunk(last[-1].id) or len(last) <= OPEN_RUN_SLACK
        previous = version
    assert waited >= 3, versions  # some came at a boundary, before being forced
    state = await Journal.open(j.store.url, checkpoint_every=0).load(key)
    assert state.context == contexts[max(contexts)]


async def test_a_sparse_thread_stores_each_message_in_one_chunk(tmp_path):
    """Records of one message each (an agent run's) reach a chunk boundary only
    every 64 records or so on average, and 100 records often pass without one. A
    checkpoint forced then writes a partly filled chunk that the next one writes
    again with more messages: a dead copy. Waiting up to FORCED_AFTER intervals
    for a boundary spares it."""
    j = Journal.open(str(tmp_path), fsync=False, checkpoint_every=10)
    key = ThreadKey("agent", "sparse", "main")
    # 35 messages without a boundary, then one: the first boundary comes after
    # three intervals, past twice the interval.
    ids = _ids(False, 35) + _ids(True, 1) + _ids(False, 3)
    versions = []
    async with j.writer(key) as w:
        for i, mid in enumerate(ids):
            await w.append([MessageAppended(Msg("user", f"m{i}", id=mid))])
            versions.append(w.version)
            if w._checkpointer is not None:
                await w._checkpointer  # each checkpoint in turn, not coalesced
    # One checkpoint, where the boundary closed the first chunk.
    assert await ThreadLog(j.store, key).checkpoint_versions() == [versions[35]]
    layout = ThreadLog(j.store, key).layout
    blobs = await j.store.list(layout.blob_dir)
    stored = [
        [m.id for m in decode_chunk(data)]
        for data in await j.store.read_many(blobs)
        if data is not None
    ]
    held = [mid for chunk in stored for mid in chunk]
    assert sorted(held) == sorted(ids[:36]), stored  # each message in one chunk
    loaded = await Journal.open(j.store.url).load(key)
    assert [m.id for m in loaded.context] == ids


async def test_background_checkpoints_progress_on_a_store_that_never_waits():
    """memory:// calls never suspend, so a tight loop of appends gives the event loop
    no other chance to run the background checkpoint: append hands it a turn."""
    j = Journal.open(f"memory://policy-{uuid.uuid4().hex}", checkpoint_every=10)
    key = ThreadKey("agent", "policy", "memory")
    async with j.writer(key) as w:
        for i in range(600):
            await w.append([MessageAppended(Msg("user", f"m{i}", id=f"m-{i}"))])
        during = await ThreadLog(j.store, key).checkpoint_versions()
    assert len(during) >= 10, during


async def test_closing_takes_the_checkpoint_the_boundary_wait_put_off(tmp_path):
    """A writer closing with the interval's worth of records since its last
    checkpoint takes one, boundary or not: the thread's next reader loads from
    it instead of replaying them. Fewer records than that: none."""
    j = Journal.open(str(tmp_path), fsync=False, checkpoint_every=10)
    open_ids = _ids(False, 60)  # no message is a boundary: the wait never ends
    busy, quiet = ThreadKey("agent", "busy", "main"), ThreadKey("agent", "quiet", "m")
    async with j.writer(busy) as w:
        for i in range(15):
            await w.append([MessageAppended(Msg("user", f"m{i}", id=open_ids[i]))])
            # The context ends in an open run: no checkpoint while writing.
            assert await ThreadLog(j.store, busy).checkpoint_versions() == []
        head = w.version
    assert await ThreadLog(j.store, busy).checkpoint_versions() == [head]
    async with j.writer(quiet) as w:
        for i in range(5):
            await w.append([MessageAppended(Msg("user", f"q{i}", id=open_ids[20 + i]))])
    assert await ThreadLog(j.store, quiet).checkpoint_versions() == []
    loaded = await Journal.open(j.store.url).load(busy)
    assert [m.text for m in loaded.context] == [f"m{i}" for i in range(15)]
    assert loaded.version == head


async def test_a_fenced_writer_closes_without_a_checkpoint(tmp_path):
    j = Journal.open(str(tmp_path), fsync=False, checkpoint_every=5)
    key = ThreadKey("agent", "fenced", "main")
    open_ids = _ids(False, 10)
    w = await j.acquire(key, holder="old", defer_fence=True)
    for i in range(8):
        await w.append([MessageAppended(Msg("user", f"m{i}", id=open_ids[i]))])
    # An idle lease is taken over at once, which fences its holder.
    assert await w.set_idle(True)
    other = await j.acquire(key, holder="new", defer_fence=True)
    assert not await w.set_idle(False)
    assert w.fenced
    await w.close()
    assert await ThreadLog(j.store, key).checkpoint_versions() == []
    await other.close()
