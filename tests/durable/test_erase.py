"""Erasing a user also erases their durable turns: queued inputs and cursors.

Before, ``Journal.erase`` deleted only the threads' own objects. A queued turn's
input (its index entry, the user's message as submitted) stayed in the store, and
the next worker ran it, bringing the erased thread back; the thread's cursor hint
stayed too, and on a thread started again under the same key it hid the new
turns' start from the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal import (
    Agent,
    Journal,
    MessageAppended,
    Msg,
    RuntimeContext,
    ScriptedModel,
)
from journal.durable import DurableClient, Worker

from ._support import PRIVATE_INPUT, files_holding

if TYPE_CHECKING:
    from pathlib import Path

ALICE = RuntimeContext(user_id="alice", session_id="s1")
ALICE_QUEUED_ONLY = RuntimeContext(user_id="alice", session_id="s2")
BOB = RuntimeContext(user_id="bob", session_id="s1")


async def test_erase_deletes_queued_turns_and_cursors(tmp_path: Path) -> None:
    # A plain journal: its inputs are in the clear, so files show what is left.
    j = Journal.open(tmp_path / "j")
    client = DurableClient(j, "a")
    # A thread with records and a queued turn; one with a queued turn only (no
    # record yet: it is no thread of the log); and another user's.
    async with j.writer(client.key(ALICE), holder="h") as w:
        await w.append([MessageAppended(Msg("user", "earlier"))])
    await client.index.write_cursor(client.key(ALICE), 7)
    for ctx in (ALICE, ALICE_QUEUED_ONLY, BOB):
        await client.submit(ctx, PRIVATE_INPUT, turn_id="t1")
    assert len(files_holding(tmp_path / "j", PRIVATE_INPUT.encode())) == 3

    erased = await j.erase(user_id="alice")

    assert erased == [client.key(ALICE)]
    left = files_holding(tmp_path / "j", PRIVATE_INPUT.encode())
    assert len(left) == 1
    assert "bob" in left[0]
    assert await client.index.read_cursor(client.key(ALICE)) == 1
    # Bob's turn runs; nothing of alice's comes back.
    agent = Agent("A", "a", ScriptedModel(["ok"] * 5), journal=j)
    await Worker(agent, poll=0.01).drain()
    for ctx in (ALICE, ALICE_QUEUED_ONLY):
        assert await j.head(client.key(ctx)) == 0
    assert [m.text for m in (await j.load(client.key(BOB))).context] == [
        PRIVATE_INPUT,
        "ok",
    ]
    await agent.close()
    await j.aclose()
