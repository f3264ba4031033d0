"""A writer meeting records it did not see coming: its own uncertain ones, a
previous holder's late ones, and a dead writer's unsynced head.

Each test failed before the fix it names, found by review:
- an append with ``expected_version`` went through after the writer adopted its
  own earlier record that had landed while its reply was lost;
- a writer with a deferred fence committed a state change worked out against its
  stale state on top of records the previous holder committed (and had
  acknowledged) after the takeover, erasing them from the state;
- a new writer built on a head record a killed writer had written but not synced,
  and nothing made it durable when the new writer's records went to another file.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from journal import Journal, MessageAppended, Msg, SummarySet, ThreadKey
from journal.errors import (
    FencedError,
    StaleStateError,
    StorageError,
    VersionConflictError,
)
from stores.local import LocalStore
from stores.memory import MemoryStore
from tests.journal._faults import LostReply
from tests.journal._syncs import syncs

if TYPE_CHECKING:
    from pathlib import Path

KEY = ThreadKey("agent", "takeover", "alice")


async def test_an_expected_version_append_conflicts_after_an_uncertain_one_landed():
    store = LostReply(f"lost-{uuid.uuid4().hex}")
    j = Journal(store)
    w = await j.acquire(KEY, "a")
    await w.append([SummarySet("one")])
    seen = w.version
    store.fail_key = w.log.record_key(seen + 1)
    with pytest.raises(StorageError):
        await w.append([SummarySet("two")])  # landed, its reply lost
    with pytest.raises(VersionConflictError):
        await w.append([SummarySet("three")], expected_version=seen)
    # The uncertain record was found and taken in: the writer is at it now.
    assert w.version == seen + 1
    assert w.state.summary == "two"
    await w.append([SummarySet("three")], expected_version=seen + 1)
    await w.close()
    assert [r.version async for r in j.records(KEY)][-1] == seen + 2


class SecondClient(MemoryStore):
    """The same objects as ``shared``: a second client of one memory store."""

    def __init__(self, shared: MemoryStore) -> None:
        super().__init__(f"{shared.url}-client")
        self._objects, self._sorted, self._lock = (
            shared._objects,
            shared._sorted,
            shared._lock,
        )


@pytest.mark.parametrize("how", ["replace_state", "update"])
async def test_a_deferred_fence_state_change_does_not_erase_late_records(how: str):
    shared = MemoryStore(f"late-{uuid.uuid4().hex}")
    ja = Journal(shared)
    # B's clock runs a minute ahead: it finds A's live lease expired at once.
    jb = Journal(SecondClient(shared), clock=lambda: time.time() + 60)
    a = await ja.acquire(KEY, "a", lease_ttl=30, defer_fence=True)
    await a.append([MessageAppended(Msg("user", "hello"))])
    await a.append([MessageAppended(Msg("assistant", "hi"))])
    b = await jb.acquire(KEY, "b", lease_ttl=30, defer_fence=True)
    base = b.version
    # B wrote nothing yet (its fence waits for its first record): A, not yet
    # fenced, commits and is acknowledged.
    late = await a.append([MessageAppended(Msg("user", "A's late message"))])
    assert late is not None
    assert late.version == base + 1

    def drop_hi(state: object) -> None:
        context = state.context  # type: ignore[attr-defined]
        state.context = [m for m in context if m.text != "hi"]  # type: ignore[attr-defined]

    if how == "replace_state":
        mine = b.state.copy()
        drop_hi(mine)
        with pytest.raises((StaleStateError, VersionConflictError)):
            await b.replace_state(mine, expected_version=base)
    else:
        # Worked out again on the state with A's record in it.
        await b.update("drop the greeting", drop_hi)
    await b.close()
    await a.close()
    texts = [m.text for m in (await jb.load(KEY)).context]
    assert "A's late message" in texts
    assert ("hi" in texts) == (how == "replace_state")


async def test_a_new_writer_makes_the_head_it_builds_on_durable(tmp_path: Path):
    root = tmp_path / "root"
    async with Journal.open(root).writer(KEY) as w:
        await w.append([MessageAppended(Msg("user", "synced"))])
    # A writer that died between its write and its sync: the same bytes, unsynced.
    unsynced = Journal(LocalStore(root, fsync=False))
    async with unsynced.writer(KEY) as w:
        head = (await w.append([MessageAppended(Msg("user", "unsynced"))])).version
    # A deferred fence writes nothing to the log until the first commit, which may
    # go to another segment file (a head at version 1023, the next at 1024).
    with syncs() as calls:
        w = await Journal.open(root).acquire(KEY, defer_fence=True)
    assert w.version == head
    assert any(call != "rename" and "/log/" in path for call, path in calls), calls
    await w.close()


async def _epoch_granted_twice(holders: tuple[str, str]) -> tuple[Journal, Any, Any]:
    """Two live writers at one epoch: ``LEASE`` deleted while the first, whose fence
    is deferred, has committed nothing, so the second restarts from the log's
    epochs and its bump hands out the same one."""
    store = MemoryStore(f"epoch-{uuid.uuid4().hex}")
    j = Journal(store, checkpoint_every=0)
    async with j.writer(KEY, "w0") as w0:
        await w0.append([SummarySet("w0")])
    a = await j.acquire(KEY, holders[0], defer_fence=True)
    await store.delete(a.log.lease_key)
    b = await j.acquire(KEY, holders[1], defer_fence=True)
    assert b.epoch == a.epoch
    return j, a, b


@pytest.mark.parametrize("holders", [("w", "w"), ("a", "b")])
@pytest.mark.parametrize("first", ["old", "new"])
async def test_two_writers_granted_one_epoch_never_interleave(
    holders: tuple[str, str], first: str
):
    """Whichever of the two commits first holds the thread; the other is fenced at
    its next commit, also under the same holder id (a worker restarted with a
    stable id), instead of taking the winner's record for an earlier one of its
    own and committing on top of it."""
    j, a, b = await _epoch_granted_twice(holders)
    winner, loser = (a, b) if first == "old" else (b, a)
    await winner.append([SummarySet("winner 1")])
    with pytest.raises(FencedError):
        await loser.append([SummarySet("loser")])
    with pytest.raises(FencedError):
        await loser.append([SummarySet("loser again")])
    await winner.append([SummarySet("winner 2")])
    summaries = [
        e.summary
        async for r in j.records(KEY)
        for e in r.events
        if isinstance(e, SummarySet)
    ]
    assert summaries == ["w0", "winner 1", "winner 2"]
    assert (await j.load(KEY)).summary == "winner 2"
    assert not (await j.verify(KEY)).problems
    await a.close()
    await b.close()


async def test_a_writer_whose_epoch_was_granted_again_loses_its_lease():
    """Under one holder id, the first writer's renewal finds ``LEASE`` at its own
    epoch and holder, but written by the second acquisition: it is fenced rather
    than taking ``LEASE`` back as its own earlier write."""
    _, a, b = await _epoch_granted_twice(("w", "w"))
    with pytest.raises(FencedError):
        await a.renew()
    await b.renew()
    await b.append([SummarySet("b")])
    await a.close()
    await b.close()


async def test_replace_state_over_a_slot_taken_at_its_own_epoch_is_fenced():
    """Not records to take in: another writer granted the same epoch holds the
    slot. ``replace_state`` raises ``FencedError`` and commits nothing, with or
    without ``expected_version``, rather than retrying or failing an assertion."""
    j, a, b = await _epoch_granted_twice(("a", "b"))
    await a.append([SummarySet("a")])
    for expected in (None, b.version):
        mine = b.state.copy()
        mine.summary = "b"
        with pytest.raises(FencedError):
            await b.replace_state(mine, expected_version=expected)
    assert [r.writer async for r in j.records(KEY)][-1] == "a"
    await a.close()
    await b.close()


class LostLeaseReply(MemoryStore):
    """Applies the next write of ``LEASE``, then reports a failure."""

    armed = False

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        etag = await super().replace(key, data, if_match=if_match)
        if self.armed and key.endswith("/LEASE"):
            self.armed = False
            raise StorageError("connection reset after the write was applied")
        return etag


async def test_closing_after_a_renewal_whose_reply_was_lost_releases_the_lease():
    """The renewal landed but the writer kept the old etag: its release must
    still free ``LEASE``, not leave it busy until the ttl runs out."""
    store = LostLeaseReply(f"release-{uuid.uuid4().hex}")
    j = Journal(store)
    w = await j.acquire(KEY, "a", lease_ttl=300)
    await w.append([SummarySet("a")])
    store.armed = True
    with pytest.raises(StorageError):
        await w.renew()
    await w.close()
    other = await j.acquire(KEY, "b", lease_ttl=300, wait=0)
    await other.append([SummarySet("b")])
    await other.close()
