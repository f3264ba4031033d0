"""A writer whose acquire (lease, rebuild, fence) outlasts its lease TTL.

The writer has written nothing yet, so it may renew its lease on the same epoch before
it commits the fence; only when another holder took the lease meanwhile must it fail,
and then with ``LeaseHeldError``, leaving the thread to that holder alone.

The delay is injected in the store's reads of everything but ``LEASE`` (the rebuild):
a TTL of 0.3 s and 0.5 s per read. Nothing here asserts on timing, only on outcomes.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

import pytest

from journal import (
    Journal,
    LeaseAcquired,
    LeaseHeldError,
    MessageAppended,
    Msg,
    ThreadKey,
)
from journal.engine.lease import acquire_lease
from journal.engine.log import ThreadLog
from stores.testing.journal_contract import RecordingStore

if TYPE_CHECKING:
    import builtins
    from collections.abc import Awaitable, Callable, Sequence

    from journal.store import ObjectStore

TTL = 0.3
DELAY = 0.5


class SlowReads(RecordingStore):
    """Delays every read of a thread object other than ``LEASE``, once armed.

    ``during`` is awaited once, in the middle of the first delayed read: it stands
    for another node acting while this one is stuck in its rebuild.
    """

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.armed = False
        self.delayed = 0
        self.during: Callable[[], Awaitable[None]] | None = None

    async def _slow(self, keys: Sequence[str]) -> None:
        if not self.armed or all(k.endswith("/LEASE") for k in keys):
            return
        self.delayed += 1
        await asyncio.sleep(DELAY)
        during, self.during = self.during, None
        if during is not None:
            await during()

    async def read(self, key: str) -> tuple[bytes, str]:
        """Read, then stall."""
        result = await super().read(key)
        await self._slow([key])
        return result

    async def read_many(
        self, keys: Sequence[str], *, concurrency: int = 16
    ) -> builtins.list[bytes | None]:
        """Read, then stall once for the batch."""
        result = await super().read_many(keys, concurrency=concurrency)
        await self._slow(keys)
        return result


@pytest.fixture(params=["memory", "local"])
def url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "memory":
        return f"memory://slow-acquire-{uuid.uuid4().hex}"
    return str(tmp_path / "journal")


def new_key() -> ThreadKey:
    return ThreadKey("slow-agent", f"s-{uuid.uuid4().hex[:12]}")


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text, id=f"id-{text}"))


async def seed(url: str, key: ThreadKey) -> Journal:
    """A thread some earlier writer left (closed): three records."""
    j = Journal.open(url, checkpoint_every=0)
    async with j.writer(key, holder="earlier") as w:
        await w.append([say("one")])
        await w.append([say("two")])
    return j


def slow_journal(url: str) -> tuple[Journal, SlowReads]:
    store = SlowReads(Journal.open(url).store)
    return Journal(store, checkpoint_every=0), store


async def test_a_slow_acquire_renews_and_commits_its_fence(url: str) -> None:
    key = new_key()
    fast = await seed(url, key)
    before = [r.epoch for r in [r async for r in fast.records(key)]]
    j, store = slow_journal(url)
    store.armed = True
    async with j.writer(key, holder="slow", lease_ttl=TTL) as w:
        assert store.delayed >= 1  # the rebuild really outlasted the TTL
        fence = [r async for r in fast.records(key)][-1]
        assert fence.version == w.version == w.base_version + 1
        assert isinstance(fence.events[0], LeaseAcquired)
        assert fence.events[0].epoch == w.epoch == fence.epoch
        assert w.epoch > max(before)
        assert not w.fenced
        await w.append([say("after a slow start")])
    state = await fast.load(key)
    assert [m.content for m in state.context] == ["one", "two", "after a slow start"]
    report = await fast.verify(key)
    assert report.ok, [str(p) for p in report.problems]


async def test_a_slow_first_writer_of_a_new_thread(url: str) -> None:
    key = new_key()
    j, store = slow_journal(url)
    store.armed = True
    async with j.writer(key, holder="slow", lease_ttl=TTL) as w:
        assert w.version == 1
        await w.append([say("hello")])
    state = await Journal.open(url).load(key)
    assert [m.content for m in state.context] == ["hello"]


@pytest.mark.parametrize("takeover", ["bare-lease", "full-writer"])
async def test_a_holder_that_took_the_lease_meanwhile_wins(
    url: str, takeover: str
) -> None:
    """Our lease expired during the rebuild and another holder took it."""
    key = new_key()
    fast = await seed(url, key)
    j, store = slow_journal(url)
    others: list[object] = []

    async def another_node_takes_over() -> None:
        # Our lease has expired by now (the read stalled past its TTL).
        if takeover == "bare-lease":
            # Swapped LEASE, fence not written yet (a node about to rebuild).
            others.append(
                await acquire_lease(
                    fast.store,
                    ThreadLog(fast.store, key).lease_key,
                    label=str(key),
                    holder="other",
                    ttl=30.0,
                    wait=0.0,
                    clock=fast.clock,
                )
            )
        else:
            others.append(await fast.acquire(key, holder="other", lease_ttl=30.0))

    store.during = another_node_takes_over
    store.armed = True
    with pytest.raises(LeaseHeldError) as info:
        await j.acquire(key, holder="slow", lease_ttl=TTL)
    assert others, "the takeover did not run during the rebuild"
    assert info.value.holder == "other"
    store.armed = False
    for other in others:
        close = getattr(other, "close", None)
        if close is not None:
            await close()
    # The other node is the one writer: it fences (again, for the bare swap) and
    # appends; nothing at the slow node's epoch ever reached the log.
    async with fast.writer(key, holder="other") as w:
        await w.append([say("from the winner")])
    records = [r async for r in fast.records(key)]
    epochs = [r.epoch for r in records]
    assert epochs == sorted(epochs)
    assert {r.writer for r in records} == {"earlier", "other"}
    state = await fast.load(key)
    assert [m.content for m in state.context] == ["one", "two", "from the winner"]
    report = await fast.verify(key)
    assert report.ok, [str(p) for p in report.problems]
