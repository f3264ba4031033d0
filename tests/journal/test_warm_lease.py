"""A writer that defers its fence and a lease kept idle between operations."""

from __future__ import annotations

import uuid

import msgspec
import pytest

from journal import Journal, ThreadKey
from journal import events as ev
from journal.engine.lease import LeaseRecord, decode_lease, encode_lease
from journal.errors import FencedError, LeaseHeldError


def _journal() -> Journal:
    return Journal.open(f"memory://warm-{uuid.uuid4().hex}")


KEY = ThreadKey("agent", "s1", "alice")


async def _types(j: Journal, key: ThreadKey = KEY) -> list[list[str]]:
    return [[type(e).__name__ for e in r.events] async for r in j.records(key, 1)]


async def test_a_deferred_fence_that_commits_nothing_writes_nothing() -> None:
    j = _journal()
    async with j.writer(KEY, "a", defer_fence=True):
        pass
    assert await j.head(KEY) == 0
    async with j.writer(KEY, "a") as w:
        await w.append([ev.SummarySet("x")])
    async with j.writer(KEY, "b", defer_fence=True):
        pass
    assert await j.head(KEY) == 2  # the plain writer's fence and its record


async def test_the_deferred_fence_travels_in_the_first_record() -> None:
    j = _journal()
    async with j.writer(KEY, "a", defer_fence=True) as w:
        await w.append([ev.SummarySet("one")])
        await w.append([ev.SummarySet("two")])
    async with j.writer(KEY, "b", defer_fence=True) as w:
        await w.append([ev.SummarySet("three")])
    assert await _types(j) == [
        ["ThreadCreated", "LeaseAcquired", "SummarySet"],
        ["SummarySet"],
        ["LeaseAcquired", "SummarySet"],
    ]
    epochs = [r.epoch async for r in j.records(KEY, 1)]
    assert epochs[0] < epochs[2]
    assert (await j.verify(KEY)).ok
    assert (await j.load(KEY)).summary == "three"


async def test_a_run_left_unfinished_is_recovered_at_once_even_when_deferred() -> None:
    j = _journal()
    async with j.writer(KEY, "a") as w:
        await w.append([ev.RunStarted("r1")], run_id="r1")
    async with j.writer(KEY, "b", defer_fence=True):
        pass
    types = await _types(j)
    assert types[-1] == ["LeaseAcquired", "RunInterrupted"]
    assert (await j.load(KEY)).active_run_id is None


async def test_an_idle_lease_is_taken_at_once_and_fences_its_holder() -> None:
    j = _journal()
    a = await j.acquire(KEY, "a", defer_fence=True)
    await a.append([ev.SummarySet("by a")])
    with pytest.raises(LeaseHeldError):
        await j.acquire(KEY, "b")
    assert await a.set_idle(True)
    assert a.idle
    b = await j.acquire(KEY, "b", defer_fence=True)
    await b.append([ev.SummarySet("by b")])
    # a cannot come back: marking busy fails, and so does any commit.
    assert not await a.set_idle(False)
    assert a.fenced
    with pytest.raises(FencedError):
        await a.append([ev.SummarySet("stale")])
    await a.close()
    await b.close()
    assert (await j.load(KEY)).summary == "by b"
    assert (await j.verify(KEY)).ok


async def test_busy_again_when_no_one_came_keeps_state_and_writes_no_fence() -> None:
    j = _journal()
    a = await j.acquire(KEY, "a", defer_fence=True)
    await a.append([ev.SummarySet("one")])
    assert await a.set_idle(True)
    assert await a.set_idle(False)
    assert not a.idle
    with pytest.raises(LeaseHeldError):
        await j.acquire(KEY, "b")  # busy again: held
    await a.append([ev.SummarySet("two")])
    await a.close()
    assert await _types(j) == [
        ["ThreadCreated", "LeaseAcquired", "SummarySet"],
        ["SummarySet"],
    ]


async def test_renewal_keeps_the_idle_mark() -> None:
    j = _journal()
    a = await j.acquire(KEY, "a", defer_fence=True)
    assert await a.set_idle(True)
    await a.renew()
    assert a.idle
    b = await j.acquire(KEY, "b")  # still takeable after the renewal
    await b.close()
    await a.close()


def test_a_busy_lease_is_stored_as_before_and_an_idle_one_is_checked() -> None:
    busy = LeaseRecord("a", 3, 100.0, 50.0, 30.0)
    raw = msgspec.json.decode(encode_lease(busy))
    assert "idle" not in raw  # byte-identical to leases written before the flag
    idle = msgspec.structs.replace(busy, idle=True)
    record, damage, checked = decode_lease(encode_lease(idle))
    assert (record.idle, damage, checked) == (True, None, True)
    # The flag is covered by the checksum: flipping it is damage, not a free lease.
    tampered = msgspec.json.decode(encode_lease(busy))
    tampered["idle"] = True
    record, damage, _ = decode_lease(msgspec.json.encode(tampered))
    assert damage is not None
    assert not record.idle
