"""``Journal.save_state`` refuses a state a commit racing its fence made stale.

``save_state`` takes the lease and commits the caller's state as the thread's new
one only if nothing changed since the caller read it. A previous holder whose
lease had expired may still commit between this writer's rebuild and its fence:
the writer takes that record in before its fence, and the state the caller read
is then stale, however current it was when the lease was taken.
"""

from __future__ import annotations

import time
import uuid

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.errors import StaleStateError
from stores.memory import MemoryStore
from stores.testing.journal_contract.base import RecordingStore


async def test_a_commit_racing_the_fence_makes_the_saved_state_stale() -> None:
    """Fails when the check compares with the head before the fence: the racing
    commit's message was taken in, then overwritten by the stale state saved."""
    store = MemoryStore(f"save-race-{uuid.uuid4().hex}")
    key = ThreadKey("agent", "s1", "alice")
    old = await Journal(store).acquire(key, holder="node-a")
    await old.append([MessageAppended(Msg("user", "before"))])
    raced: list[int] = []

    async def old_commits_first(store_key: str) -> None:
        if not raced and "/log/" in store_key:
            raced.append(
                (await old.append([MessageAppended(Msg("user", "raced"))])).version
            )

    later = Journal(
        RecordingStore(store, before_create=old_commits_first),
        clock=lambda: time.time() + 3600,  # the old lease has expired for it
    )
    stale = await later.load(key)
    stale.summary = "saved over a stale state"
    with pytest.raises(StaleStateError):
        await later.save_state(key, stale, holder="node-b")
    assert raced
    await old.close()
    state = await Journal(store).load(key)
    assert [m.text for m in state.context] == ["before", "raced"]
    assert state.summary is None
