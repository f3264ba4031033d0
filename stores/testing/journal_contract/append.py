"""Append and read: reload, the empty thread, records, their order and hash chain.

Also time travel (``load(at_version=N)`` for every N) and concurrent appends on one
writer, which commit one after another.
"""

# ruff: noqa: S101

from __future__ import annotations

import asyncio
import itertools

import pytest

from journal import (
    LeaseAcquired,
    PermissionRuleSet,
    RunCompleted,
    RunStarted,
    SummarySet,
    ThreadCreated,
    TodosWritten,
    ToolCallCompleted,
    ToolCallRequested,
)
from stores.testing.journal_contract.base import (
    JournalFactory,
    JournalFixtures,
    all_records,
    empty_state,
    encoded,
    new_key,
    say,
    texts,
)

__all__ = ["AppendContract"]

_GENESIS = "00" * 32
"""The ``prev_hash`` of a thread's first record."""


class AppendContract(JournalFixtures):
    """Append and read back: records, their order, the hash chain, time travel."""

    async def test_append_then_reload_with_a_new_journal(
        self, journal: JournalFactory
    ) -> None:
        """A second journal object sees exactly what the writer committed."""
        key = new_key(user_id="alice")
        j = journal()
        async with j.writer(key, holder="node-a") as w:
            assert w.version == 1  # the fence record (with ThreadCreated)
            rec = await w.append([say("hello"), say("hi there", "assistant")])
            assert rec.version == 2
            assert w.version == 2
            await w.append([PermissionRuleSet("bash", "deny")])
            live = w.state.copy()
        other = journal()
        assert await other.head(key) == 3
        state = await other.load(key)
        assert encoded(state) == encoded(live)
        assert state.version == 3
        assert texts(state) == ["hello", "hi there"]
        assert state.permission_context.rules == {"bash": "deny"}
        assert (state.session_id, state.user_id, state.thread_id) == (
            key.session_id,
            "alice",
            "main",
        )
        report = await other.verify(key)
        assert report.ok, report.problems
        assert report.head == 3

    async def test_empty_thread(self, journal: JournalFactory) -> None:
        """A thread never written has head 0, the empty state and no records."""
        key = new_key()
        j = journal()
        assert await j.head(key) == 0
        assert encoded(await j.load(key)) == encoded(empty_state(key))
        assert await all_records(j, key) == []
        report = await j.verify(key)
        assert report.ok
        assert report.head == 0

    async def test_records_content_order_and_hash_chain(
        self, journal: JournalFactory
    ) -> None:
        """records() yields every commit in order, its events intact, chained."""
        key = new_key()
        j = journal()
        appended: list[list[object]] = [
            [say("one")],
            [RunStarted("run-1"), ToolCallRequested("c1", "bash", {"cmd": "ls"})],
            [ToolCallCompleted("c1", ["a", "b"]), RunCompleted("run-1")],
            [TodosWritten([{"content": "x", "done": False}], 1)],
        ]
        async with j.writer(key, holder="node-a") as w:
            acked = [
                await w.append(events, run_id="run-1" if i else None)
                for i, events in enumerate(appended)
            ]
        records = await all_records(journal(), key)
        assert [r.version for r in records] == [1, 2, 3, 4, 5]
        fence = records[0]
        assert isinstance(fence.events[0], ThreadCreated)
        assert fence.events[0].session_id == key.session_id
        assert fence.events[1] == LeaseAcquired(fence.epoch, "node-a")
        for record, events, ack in zip(records[1:], appended, acked, strict=True):
            assert record.events == events
            assert (record.version, record.batch_id, record.hash) == (
                ack.version,
                ack.batch_id,
                ack.hash,
            )
            assert record.epoch == fence.epoch
            assert record.writer == "node-a"
        assert records[1].run_id is None
        assert records[2].run_id == "run-1"
        assert records[0].prev_hash == _GENESIS
        for before, after in itertools.pairwise(records):
            assert after.prev_hash == before.hash
        assert len({r.hash for r in records}) == len(records)
        assert len({r.batch_id for r in records}) == len(records)
        # Ranges: start <= version < stop.
        j2 = journal()
        assert [r.version async for r in j2.records(key, start=2, stop=4)] == [2, 3]
        assert [r.version async for r in j2.records(key, start=4)] == [4, 5]
        assert [r.version async for r in j2.records(key, start=9)] == []

    async def test_time_travel_every_version(self, journal: JournalFactory) -> None:
        """load(at_version=N) is the state right after version N, for every N."""
        key = new_key()
        j = journal(checkpoint_every=3)
        expected: dict[int, bytes] = {0: encoded(empty_state(key))}
        for round_ in range(3):
            async with j.writer(key, holder=f"node-{round_}") as w:
                expected[w.version] = encoded(w.state)
                for i in range(4):
                    await w.append([say(f"r{round_} m{i}")])
                    expected[w.version] = encoded(w.state)
                await w.append([SummarySet(f"summary {round_}")])
                expected[w.version] = encoded(w.state)
                if round_ == 1:
                    await w.clear_context("time travel")
                    expected[w.version] = encoded(w.state)
                    await w.checkpoint()
        head = await j.head(key)
        assert sorted(expected) == list(range(head + 1))
        reader = journal()
        for version in range(head + 1):
            state, warnings = await reader.load_with_warnings(key, at_version=version)
            assert warnings == []
            assert state.version == version
            assert encoded(state) == expected[version], version
        assert encoded(await reader.load(key)) == expected[head]
        with pytest.raises(ValueError, match="version"):
            await reader.load(key, at_version=head + 1)
        with pytest.raises(ValueError, match="at_version"):
            await reader.load(key, at_version=-1)

    async def test_concurrent_appends_on_one_writer(
        self, journal: JournalFactory
    ) -> None:
        """Appends issued concurrently on one writer commit one after another."""
        key = new_key()
        async with journal().writer(key) as w:
            acked = await asyncio.gather(
                *(w.append([say(f"m{i}")], batch_id=f"b{i}") for i in range(20))
            )
            head = w.version
        assert sorted(r.version for r in acked) == list(range(2, head + 1))
        records = await all_records(journal(), key)
        for rec in acked:
            assert records[rec.version - 1].batch_id == rec.batch_id
        assert sorted(texts(await journal().load(key))) == sorted(
            f"m{i}" for i in range(20)
        )
