"""Fencing: a superseded writer never lands a commit after its successor's fence.

Covers zombie writers, a lower-epoch commit that lands between a takeover's lease
swap and its fence (it is kept), a lease swapped with no fence yet, a ``LEASE``
object that was deleted or garbled (the next fence still outranks the log), a writer
whose renewals fail, and the ``RunInterrupted`` a takeover records for an
unfinished run.
"""

# ruff: noqa: S101

from __future__ import annotations

import asyncio
import time

import pytest

from journal import (
    FencedError,
    LeaseAcquired,
    Record,
    RunInterrupted,
    RunStarted,
    StorageError,
    ToolCallRequested,
)
from journal.engine import lease as leases
from journal.layout import ThreadLayout
from stores.testing.journal_contract.base import (
    JournalFactory,
    JournalFixtures,
    RecordingStore,
    all_records,
    batch_ids,
    encoded,
    new_key,
    say,
    texts,
)

__all__ = ["FencingContract"]


class FencingContract(JournalFixtures):
    """Superseded writers are fenced; commits that won their slot are kept."""

    async def test_fenced_writer_never_lands(self, journal: JournalFactory) -> None:
        """After a takeover the old writer's appends raise FencedError and vanish."""
        key = new_key()
        j_old = journal()
        # The new node's clock is far ahead: the old lease looks expired to it.
        j_new = journal(clock=lambda: time.time() + 3600)
        old = await j_old.acquire(key, holder="node-a")
        try:
            await old.append([say("acknowledged")], batch_id="old-1")
            async with j_new.writer(key, holder="node-b") as new:
                assert new.epoch > old.epoch
                for attempt in range(3):
                    with pytest.raises(FencedError) as info:
                        await old.append(
                            [say(f"zombie {attempt}")], batch_id=f"zombie-{attempt}"
                        )
                    assert info.value.epoch == old.epoch
                    assert str(key) in str(info.value)
                assert old.fenced
                with pytest.raises(FencedError):
                    await old.checkpoint()
                head = new.version
                assert await j_new.head(key) == head
                await new.append([say("from the new writer")])
            with pytest.raises(FencedError):
                await old.append([say("zombie again")])
        finally:
            await old.close()
        records = await all_records(journal(), key)
        assert not any(b.startswith("zombie") for b in batch_ids(records))
        assert "old-1" in batch_ids(records)
        assert texts(await journal().load(key)) == [
            "acknowledged",
            "from the new writer",
        ]
        assert [r.epoch for r in records] == sorted(r.epoch for r in records)
        report = await journal().verify(key)
        assert report.ok, report.problems

    async def test_first_fenced_append_reports_the_newer_epoch(
        self, journal: JournalFactory
    ) -> None:
        """The append that collides with the fence names both epochs."""
        key = new_key()
        old = await journal().acquire(key, holder="node-a")
        try:
            new = await journal().acquire(key, holder="node-a")
            try:
                with pytest.raises(FencedError) as info:
                    await old.append([say("zombie")])
                assert info.value.epoch == old.epoch
                assert info.value.current_epoch == new.epoch
            finally:
                await new.close()
        finally:
            await old.close()

    async def test_lower_epoch_commit_before_the_fence_is_applied(
        self, journal: JournalFactory
    ) -> None:
        """A commit landing between a takeover's lease swap and its fence is kept.

        The new writer finds its fence slot taken by the old epoch: a valid commit by
        a writer that was still alive. It applies it and fences after it; the old
        writer's next append is fenced.
        """
        key = new_key()
        j_old = journal()
        old = await j_old.acquire(key, holder="node-a")
        interleaved: list[Record] = []

        async def old_commits_first(store_key: str) -> None:
            if not interleaved and "/log/" in store_key:
                interleaved.append(
                    await old.append([say("raced the fence")], batch_id="old-race")
                )

        j_new = journal(
            clock=lambda: time.time() + 3600,
            wrap=lambda s: RecordingStore(s, before_create=old_commits_first),
        )
        try:
            await old.append([say("before")], batch_id="old-0")
            base = old.version
            async with j_new.writer(key, holder="node-b") as new:
                assert interleaved
                assert interleaved[0].version == base + 1
                assert new.base_version == base
                assert new.version == base + 2  # the old commit, then the fence
                assert texts(new.state) == ["before", "raced the fence"]
                with pytest.raises(FencedError):
                    await old.append([say("too late")], batch_id="old-late")
                await new.append([say("from b")])
                live = new.state.copy()
        finally:
            await old.close()
        records = await all_records(journal(), key)
        assert batch_ids(records)[base] == "old-race"
        assert records[base].epoch == old.epoch
        assert isinstance(records[base + 1].events[0], LeaseAcquired)
        assert "old-late" not in batch_ids(records)
        assert encoded(await journal().load(key)) == encoded(live)
        assert (await journal().verify(key)).ok

    async def test_commit_after_a_bare_lease_swap_is_applied(
        self, journal: JournalFactory
    ) -> None:
        """A lease swapped with no fence yet does not lose the old writer's commits."""
        key = new_key()
        j_old, j_new = journal(), journal(clock=lambda: time.time() + 3600)
        old = await j_old.acquire(key, holder="node-a")
        try:
            await old.append([say("one")])
            # The new node swaps the lease and "crashes" before writing its fence.
            lease = await leases.acquire_lease(
                j_new.store,
                ThreadLayout.of(key).lease_key,
                label=str(key),
                holder="node-b",
                ttl=30.0,
                wait=0.0,
                clock=j_new.clock,
            )
            assert lease.record.epoch == old.epoch + 1
            landed = await old.append([say("after the swap")])
            async with j_new.writer(key, holder="node-b") as new:
                assert new.epoch == old.epoch + 2
                assert new.base_version == landed.version
                assert texts(new.state) == ["one", "after the swap"]
                with pytest.raises(FencedError):
                    await old.append([say("fenced")])
        finally:
            await old.close()
        state = await journal().load(key)
        assert texts(state) == ["one", "after the swap"]
        assert (await journal().verify(key)).ok

    @pytest.mark.parametrize("damage", ["deleted", "garbled"])
    async def test_a_lost_lease_object_never_lowers_the_epoch(
        self, journal: JournalFactory, damage: str
    ) -> None:
        """With LEASE gone or unreadable, the next fence still outranks the log.

        Otherwise the new fence would look like an older writer's commit: the old
        writer would apply it and write on, and fence the new lease holder.
        """
        key = new_key()
        j = journal()
        for holder in ("node-a", "node-b", "node-c"):
            async with j.writer(key, holder=holder) as w:
                await w.append([say(holder)])
        old = await journal(clock=lambda: time.time() + 3600).acquire(
            key, holder="node-old"
        )
        try:
            top = old.epoch
            lease_key = ThreadLayout.of(key).lease_key
            if damage == "deleted":
                assert await j.store.delete(lease_key)
            else:
                await j.store.replace(lease_key, b"\x00not a lease", if_match=None)
            async with journal().writer(key, holder="node-new") as new:
                assert new.epoch > top
                with pytest.raises(FencedError):
                    await old.append([say("zombie")])
                await new.append([say("node-new")])
        finally:
            await old.close()
        records = await all_records(journal(), key)
        assert [r.epoch for r in records] == sorted(r.epoch for r in records)
        assert texts(await journal().load(key)) == [
            "node-a",
            "node-b",
            "node-c",
            "node-new",
        ]
        report = await journal().verify(key)
        assert report.ok, [str(p) for p in report.problems]

    async def test_writer_whose_renewals_fail_stops_appending(
        self, journal: JournalFactory
    ) -> None:
        """A writer that cannot renew stops before its lease could expire."""
        key = new_key()
        failing = [False]

        async def fail_lease_writes(store_key: str) -> None:
            if failing[0] and store_key.endswith("/LEASE"):
                raise StorageError("the lease cannot be written", transient=True)

        class LeaseFailingStore(RecordingStore):
            async def replace(
                self, key: str, data: bytes, *, if_match: str | None
            ) -> str:
                await fail_lease_writes(key)
                return await super().replace(key, data, if_match=if_match)

        j = journal(wrap=LeaseFailingStore)
        w = await j.acquire(key, holder="node-a", lease_ttl=0.4)
        acked: list[str] = []

        async def append_until_refused() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                rec = await w.append([say(f"m{len(acked)}")])
                acked.append(rec.batch_id)
                await asyncio.sleep(0.02)

        try:
            failing[0] = True
            with pytest.raises(FencedError) as info:
                await append_until_refused()
            assert info.value.current_epoch is None
            with pytest.raises(FencedError):
                await w.append([say("after")], batch_id="after")
        finally:
            failing[0] = False
            await w.close()
        # Once the lease expires another holder takes over and sees every ack.
        async with journal().writer(key, holder="node-b", wait=30.0) as w2:
            assert w2.epoch > w.epoch
        records = await all_records(journal(), key)
        batches = batch_ids(records)
        assert all(b in batches for b in acked)
        assert "after" not in batches

    async def test_takeover_records_an_unfinished_run(
        self, journal: JournalFactory
    ) -> None:
        """The next writer records RunInterrupted(by="recovery") in its fence."""
        key = new_key()
        w = await journal().acquire(key, holder="node-a")
        await w.append([RunStarted("run-1")], run_id="run-1")
        await w.append([ToolCallRequested("c1", "bash", {"cmd": "deploy"})])
        # node-a dies without finishing the run; a restart of the same holder.
        async with journal().writer(key, holder="node-a") as new:
            assert new.state.shutdown_interrupted
            assert new.state.active_run_id is None
            assert list(new.state.tool_context.pending_calls) == ["c1"]
        await w.close()
        records = await all_records(journal(), key)
        fence = records[3]
        assert RunInterrupted("run-1", reason="recovered", by="recovery") in (
            fence.events
        )
        state = await journal().load(key)
        assert state.shutdown_interrupted
        assert list(state.tool_context.pending_calls) == ["c1"]
