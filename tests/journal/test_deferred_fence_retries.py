"""A batch retried by a later writer is the same commit, deferred fences or not.

A writer that defers its fence commits it in its first record, beside the
caller's events. A retry of that batch by a later writer (after a crash, say)
must find it: the fence is the writer's, not the batch's. And a deferred writer
takes in the records that land after its rebuild on its first append's way: a
retry whose original is among them is that record, not a second one.
"""

from __future__ import annotations

import uuid

import pytest

from journal import Journal, SummarySet, ThreadKey
from stores.memory import MemoryStore

KEY = ThreadKey("agent", "retries", "alice")


async def test_a_later_writer_retrying_a_deferred_writers_first_batch() -> None:
    """Fails when the comparison includes the first writer's fence: the retry
    raised ValueError ("already used for different events")."""
    j = Journal(MemoryStore(f"deferred-retry-{uuid.uuid4().hex}"))
    async with j.writer(KEY, holder="a", defer_fence=True) as w:
        first = await w.append([SummarySet("once")], batch_id="b1")
    async with j.writer(KEY, holder="b", defer_fence=True) as w:
        again = await w.append([SummarySet("once")], batch_id="b1")
    assert again.version == first.version
    assert [r.batch_id async for r in j.records(KEY)].count("b1") == 1
    async with j.writer(KEY, holder="c", defer_fence=True) as w:
        with pytest.raises(ValueError, match="already used"):
            await w.append([SummarySet("other")], batch_id="b1")


async def test_a_retry_whose_original_landed_after_the_rebuild() -> None:
    """Fails when records taken in on the first append's way are not looked at:
    the original, landed after the deferred writer rebuilt, was committed twice."""
    j = Journal(MemoryStore(f"deferred-late-{uuid.uuid4().hex}"))
    old = await j.acquire(KEY, holder="a")
    later = await Journal(j.store).acquire(KEY, holder="a", defer_fence=True)
    # The old writer's append lands after the later one rebuilt (same holder:
    # a restarted process whose predecessor is still finishing a request).
    original = await old.append([SummarySet("once")], batch_id="b2")
    again = await later.append([SummarySet("once")], batch_id="b2")
    assert again.version == original.version
    assert [r.batch_id async for r in j.records(KEY)].count("b2") == 1
    await later.close()
    await old.close()
