"""The writer's fence, ``create_only``, and the release of its lease on close.

Each test failed before the fix it names, found by review:
- a deferred fence travelled in two records when the writer's first record had
  landed with its reply lost and the next append took it in;
- the fence record's events were worked out once, from the state rebuilt before
  the fence, although records a previous holder committed in between were taken in
  on the way (a completed run interrupted, the next one never recovered, a second
  ``ThreadCreated``);
- ``create_only`` let two racing writers both create the thread;
- a released lease kept other holders out while the releaser's clock was ahead;
- a writer that had fenced itself (an idle mark that failed, its lease timed out
  locally) never released its lease on close;
- a cancelled ``close()`` left the lease held, and a second ``close()`` did nothing.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from journal import (
    Journal,
    MessageAppended,
    Msg,
    SummarySet,
    ThreadKey,
    ThreadWriter,
)
from journal import events as ev
from journal.errors import FencedError, StorageError, VersionConflictError
from stores.memory import MemoryStore
from tests.journal._faults import LostReply


def new_key() -> ThreadKey:
    return ThreadKey("agent", uuid.uuid4().hex[:12], "alice")


async def event_names(j: Journal, key: ThreadKey) -> list[list[str]]:
    return [[type(e).__name__ for e in r.events] async for r in j.records(key)]


async def taken_next(j: Journal, key: ThreadKey, w: ThreadWriter) -> None:
    """Another holder takes the thread at once, at the epoch after ``w``'s."""
    other = await j.acquire(key, "node-b")
    assert other.epoch == w.epoch + 1
    await other.close()


async def test_a_deferred_fence_lands_once_after_its_first_record_is_taken_in():
    store = LostReply(f"deferred-{uuid.uuid4().hex}")
    j = Journal(store)
    key = new_key()
    w = await j.acquire(key, "a", defer_fence=True)
    store.fail_key = w.log.record_key(1)
    with pytest.raises(StorageError):
        await w.append([SummarySet("one")])  # landed at 1, its reply lost
    record = await w.append([SummarySet("two")])  # takes 1 in, commits 2
    assert record.version == 2
    await w.close()
    assert await event_names(j, key) == [
        ["ThreadCreated", "LeaseAcquired", "SummarySet"],
        ["SummarySet"],
    ]
    assert (await j.verify(key)).ok


class BeforeCreate(MemoryStore):
    """Runs ``hook`` once, before the create of ``target`` goes ahead."""

    target: str | None = None
    hook: object = None

    async def create(self, key: str, data: bytes) -> str:
        if key == self.target and self.hook is not None:
            hook, self.hook = self.hook, None
            await hook()  # type: ignore[operator]
        return await super().create(key, data)


async def test_the_fence_is_worked_out_again_from_the_records_met_on_its_way():
    """A zombie of the same holder finishes its run and starts another while the
    new writer rebuilds: the fence recovers the run left active, not the one that
    completed."""
    store = BeforeCreate(f"stale-fence-{uuid.uuid4().hex}")
    j = Journal(store)
    key = new_key()
    old = await j.acquire(key, "pod-1")
    await old.append([ev.RunStarted("run-1")], run_id="run-1")

    async def old_goes_on() -> None:
        await old.append([ev.RunCompleted("run-1")], run_id="run-1")
        await old.append([ev.RunStarted("run-2")], run_id="run-2")

    store.target = old.log.record_key(old.version + 1)
    store.hook = old_goes_on
    new = await j.acquire(key, "pod-1")  # takes its own lease over: epoch 2
    assert new.state.active_run_id is None
    await new.close()
    records = [r async for r in j.records(key)]
    interrupted = [
        e.run_id for r in records for e in r.events if isinstance(e, ev.RunInterrupted)
    ]
    assert interrupted == ["run-2"]
    fence = records[-1]
    assert fence.epoch == new.epoch
    assert [type(e).__name__ for e in fence.events] == [
        "LeaseAcquired",
        "RunInterrupted",
    ]
    assert (await j.load(key)).active_run_id is None
    assert (await j.verify(key)).ok


class FirstFenceWaits(MemoryStore):
    """The first create of record 1 waits until a second one arrives, which then
    lets the first land before it goes on."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.record_1: str | None = None
        self.arrivals = 0
        self.second_here = asyncio.Event()
        self.first_landed = asyncio.Event()

    async def create(self, key: str, data: bytes) -> str:
        if key != self.record_1:
            return await super().create(key, data)
        self.arrivals += 1
        if self.arrivals == 1:
            await self.second_here.wait()
            try:
                return await super().create(key, data)
            finally:
                self.first_landed.set()
        if self.arrivals == 2:
            self.second_here.set()
            await self.first_landed.wait()
        return await super().create(key, data)


async def _race_two_first_writers(
    create_only: bool,
) -> tuple[Journal, ThreadKey, list[object]]:
    store = FirstFenceWaits(f"race-{uuid.uuid4().hex}")
    j = Journal(store)
    key = new_key()
    store.record_1 = j._log(key).record_key(1)

    async def go(name: str) -> object:
        try:
            return await j.acquire(
                key,
                "importer",
                create_only=create_only,
                fence_events=[SummarySet(name)] if create_only else (),
            )
        except VersionConflictError as exc:
            return exc

    first = asyncio.create_task(go("A"))
    while store.arrivals < 1:  # A holds epoch 1 and waits at its fence
        await asyncio.sleep(0)
    second = asyncio.create_task(go("B"))  # the same holder takes epoch 2
    results = list(await asyncio.gather(first, second))
    for result in results:
        if not isinstance(result, Exception):
            await result.close()  # type: ignore[attr-defined]
    return j, key, results


async def test_create_only_refuses_when_a_racing_writer_created_the_thread():
    j, key, results = await _race_two_first_writers(create_only=True)
    first, second = results
    assert not isinstance(first, Exception)
    assert isinstance(second, VersionConflictError)
    assert "already exists" in str(second)
    names = await event_names(j, key)
    assert names == [["ThreadCreated", "LeaseAcquired", "SummarySet"]]


async def test_racing_first_writers_create_the_thread_once():
    j, key, results = await _race_two_first_writers(create_only=False)
    assert not any(isinstance(r, Exception) for r in results)
    names = await event_names(j, key)
    assert names == [["ThreadCreated", "LeaseAcquired"], ["LeaseAcquired"]]
    assert (await j.verify(key)).ok


async def test_a_released_lease_is_taken_at_once_by_a_holder_whose_clock_is_behind():
    store = MemoryStore(f"skew-{uuid.uuid4().hex}")
    base = time.time()
    ahead = Journal(store, clock=lambda: base + 5.0)
    behind = Journal(store, clock=lambda: base)
    key = new_key()
    async with ahead.writer(key, "node-a") as w:
        await w.append([SummarySet("from a")])
        epoch = w.epoch
    released, _ = await ahead._log(key).read_lease()
    assert released is not None
    assert (released.holder, released.epoch) == ("node-a", epoch)  # epoch kept
    async with behind.writer(key, "node-b") as w:
        assert w.epoch == epoch + 1
        await w.append([SummarySet("from b")])
    assert (await behind.load(key)).summary == "from b"


class FailReplaceOnce(MemoryStore):
    """Fails the next ``replace`` before anything is applied."""

    fail = False

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        if self.fail:
            self.fail = False
            raise StorageError("timeout before the request was sent")
        return await super().replace(key, data, if_match=if_match)

    async def replace_unsynced(
        self, key: str, data: bytes, *, if_match: str | None
    ) -> str:
        return await self.replace(key, data, if_match=if_match)


async def test_a_writer_fenced_by_a_failed_idle_mark_releases_its_lease_on_close():
    store = FailReplaceOnce(f"idle-fail-{uuid.uuid4().hex}")
    j = Journal(store)
    key = new_key()
    w = await j.acquire(key, "node-a")
    await w.append([SummarySet("x")])
    store.fail = True
    assert not await w.set_idle(True)
    assert w.fenced
    await w.close()
    await taken_next(j, key, w)


async def test_a_writer_whose_lease_timed_out_locally_releases_it_on_close():
    j = Journal(MemoryStore(f"timeout-{uuid.uuid4().hex}"))
    key = new_key()
    w = await j.acquire(key, "node-a")
    # As if the loop had stalled past the lease's safe margin: the writer stops
    # committing, though no one took LEASE.
    w._valid_until = time.monotonic() - 1.0
    with pytest.raises(FencedError):
        await w.append([SummarySet("late")])
    await w.close()
    await taken_next(j, key, w)


async def test_a_writer_fenced_by_another_leaves_that_writers_lease_alone():
    j = Journal(MemoryStore(f"fenced-{uuid.uuid4().hex}"))
    later = Journal(j.store, clock=lambda: time.time() + 3600)
    key = new_key()
    old = await j.acquire(key, "node-a")
    new = await later.acquire(key, "node-b")
    with pytest.raises(FencedError):
        await old.append([SummarySet("too late")])
    await old.close()
    held, _ = await j._log(key).read_lease()
    assert held is not None
    assert (held.holder, held.epoch) == ("node-b", new.epoch)
    assert not held.idle
    assert held.expires_at > later.clock()
    await new.close()


class Gated(MemoryStore):
    """A store whose chosen writes wait for ``go``; ``entered``: one does."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.go = asyncio.Event()
        self.entered = asyncio.Event()

    async def gate(self) -> None:
        self.entered.set()
        await self.go.wait()


class SlowCheckpoints(Gated):
    """Checkpoint writes wait for ``go``."""

    async def create_derived(self, key: str, data: bytes) -> bool:
        if "/checkpoints/" in key:
            await self.gate()
        return await super().create_derived(key, data)


async def test_a_close_cancelled_while_a_checkpoint_runs_still_releases_the_lease():
    store = SlowCheckpoints(f"cancel-close-{uuid.uuid4().hex}")
    j = Journal(store, checkpoint_every=1)
    key = new_key()
    w = await j.acquire(key, "node-a")
    await w.append([MessageAppended(Msg("user", "m"))])
    await store.entered.wait()  # the background checkpoint waits
    closing = asyncio.create_task(w.close())
    for _ in range(10):  # until close() waits for that checkpoint
        await asyncio.sleep(0)
    assert not closing.done()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    other = await j.acquire(key, "node-b")
    assert other.epoch == w.epoch + 1
    store.go.set()
    await w.close()  # nothing left to do
    await other.close()


class SlowRelease(Gated):
    """Lease writes wait for ``go`` once ``hold`` is set (the release's)."""

    hold = False

    async def replace_unsynced(
        self, key: str, data: bytes, *, if_match: str | None
    ) -> str:
        if self.hold and key.endswith("/LEASE"):
            await self.gate()
        return await super().replace_unsynced(key, data, if_match=if_match)


async def test_a_second_close_finishes_a_release_the_first_was_cancelled_in():
    store = SlowRelease(f"cancel-release-{uuid.uuid4().hex}")
    j = Journal(store)
    key = new_key()
    w = await j.acquire(key, "node-a")
    await w.append([SummarySet("x")])
    store.hold = True
    closing = asyncio.create_task(w.close())
    await store.entered.wait()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    store.go.set()
    await w.close()
    await taken_next(j, key, w)


async def test_a_deferred_fence_does_not_create_a_thread_a_previous_holder_created():
    """Both writers defer their fences on a new thread; the older commits first,
    after the takeover, and the newer's first record takes it in."""
    j = Journal(MemoryStore(f"deferred-race-{uuid.uuid4().hex}"))
    later = Journal(j.store, clock=lambda: time.time() + 3600)
    key = new_key()
    old = await j.acquire(key, "node-a", defer_fence=True)
    new = await later.acquire(key, "node-b", defer_fence=True)
    await old.append([SummarySet("old")])  # lands at 1: old saw no fence
    await new.append([SummarySet("new")])  # takes 1 in, commits 2
    await old.close()
    await new.close()
    assert await event_names(j, key) == [
        ["ThreadCreated", "LeaseAcquired", "SummarySet"],
        ["LeaseAcquired", "SummarySet"],
    ]
    assert (await j.verify(key)).ok
