"""The writer lease: held by another holder, waited for, taken over by the same holder.

Also that closing a superseded writer keeps its successor's lease, and that of many
holders racing for a new thread's lease exactly one wins.
"""

# ruff: noqa: S101

from __future__ import annotations

import asyncio
import time

import pytest

from journal import FencedError, LeaseHeldError
from journal.engine import lease as leases
from journal.layout import ThreadLayout
from stores.testing.journal_contract.base import (
    JournalFactory,
    JournalFixtures,
    all_records,
    new_key,
    say,
    texts,
)

__all__ = ["LeaseContract"]


class LeaseContract(JournalFixtures):
    """One writer per thread: the lease is held, waited for, taken over, raced for."""

    async def test_lease_held_by_another_holder(self, journal: JournalFactory) -> None:
        """A second holder gets LeaseHeldError naming the holder and epoch."""
        key = new_key()
        j1, j2 = journal(), journal()
        async with j1.writer(key, holder="node-a") as w:
            await w.append([say("mine")])
            with pytest.raises(LeaseHeldError) as info:
                async with j2.writer(key, holder="node-b"):
                    pytest.fail("the lease was granted twice")
            assert info.value.holder == "node-a"
            assert info.value.epoch == w.epoch
            assert "node-a" in str(info.value)
            assert str(key) in str(info.value)
            assert info.value.expires_at > time.time()
            # Nothing was written by the refused writer.
            assert await j2.head(key) == w.version
            await w.append([say("still mine")])
        assert texts(await journal().load(key)) == ["mine", "still mine"]

    async def test_wait_succeeds_after_the_holder_closes(
        self, journal: JournalFactory
    ) -> None:
        """wait= polls until the holder releases, then takes the next epoch."""
        key = new_key()
        j1, j2 = journal(), journal()
        first = await j1.acquire(key, holder="node-a")
        await first.append([say("from a")])
        waiter = asyncio.create_task(j2.acquire(key, holder="node-b", wait=30.0))
        await asyncio.sleep(0.05)
        assert not waiter.done()  # node-a's lease is live for 30 s
        await first.close()
        second = await waiter
        try:
            assert second.epoch == first.epoch + 1
            assert second.base_version == first.version
            assert texts(second.state) == ["from a"]
            await second.append([say("from b")])
        finally:
            await second.close()
        records = await all_records(journal(), key)
        assert [r.epoch for r in records] == sorted(r.epoch for r in records)
        assert texts(await journal().load(key)) == ["from a", "from b"]

    async def test_same_holder_takes_over_its_own_lease(
        self, journal: JournalFactory
    ) -> None:
        """A restarted holder takes over its unexpired lease; the old one is fenced."""
        key = new_key()
        j1, j2 = journal(), journal()
        old = await j1.acquire(key, holder="node-a")
        try:
            await old.append([say("before restart")])
            async with j2.writer(key, holder="node-a") as new:
                assert new.epoch == old.epoch + 1
                assert texts(new.state) == ["before restart"]
                with pytest.raises(FencedError):
                    await old.append([say("zombie")])
                await new.append([say("after restart")])
        finally:
            await old.close()
        state = await journal().load(key)
        assert texts(state) == ["before restart", "after restart"]

    async def test_closing_a_superseded_writer_keeps_the_new_lease(
        self, journal: JournalFactory
    ) -> None:
        """An old writer's close never releases the lease its successor holds."""
        key = new_key()
        j1, j2, j3 = journal(), journal(), journal()
        old = await j1.acquire(key, holder="node-a")
        new = await j2.acquire(key, holder="node-a")
        try:
            await old.close()  # never appended: it does not know it was fenced
            with pytest.raises(LeaseHeldError) as info:
                await j3.acquire(key, holder="node-c")
            assert info.value.epoch == new.epoch
            await new.append([say("still the owner")])
        finally:
            await new.close()
        lease, _ = await leases.read_lease(j3.store, ThreadLayout.of(key).lease_key)
        assert lease is not None
        assert lease.epoch == new.epoch

    async def test_racing_acquires_grant_one_lease(
        self, journal: JournalFactory
    ) -> None:
        """Of many holders racing for a new thread's lease, exactly one wins."""
        key = new_key()
        holders = [f"node-{i}" for i in range(8)]
        results = await asyncio.gather(
            *(journal().acquire(key, holder=h) for h in holders),
            return_exceptions=True,
        )
        winners = [r for r in results if not isinstance(r, BaseException)]
        try:
            assert len(winners) == 1, results
            losers = [r for r in results if isinstance(r, BaseException)]
            assert all(isinstance(e, LeaseHeldError) for e in losers), losers
            assert {e.holder for e in losers if isinstance(e, LeaseHeldError)} == {
                winners[0].holder
            }
            await winners[0].append([say("the only writer")])
        finally:
            for w in winners:
                await w.close()
        records = await all_records(journal(), key)
        assert len(records) == 2
        assert (await journal().verify(key)).ok
