"""An append the writer could not fold is refused before it is written.

The writer folds a record into its state after publishing it. Before, an event
the fold refuses (an unknown event marked required, an ``AgentStateReplaced``
still naming chunks or holding a state that does not decode) was committed, then
the fold raised: the append failed after its record was in the log, and every
later load of the thread refused to build state. Found importing a hostile export.
"""

from __future__ import annotations

import uuid

import msgspec
import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal import events as ev
from journal.errors import InvalidEventError
from stores.memory import MemoryStore

KEY = ThreadKey("agent", "fold", "alice")

UNFOLDABLE = {
    "unknown required": ev.UnknownEvent(
        "x.FutureEvent", 1, True, msgspec.msgpack.encode({"type": "x.FutureEvent"})
    ),
    "replaced with chunks": ev.AgentStateReplaced("r", b"", chunks=["ab" * 32]),
    "replaced with a bad state": ev.AgentStateReplaced("r", b"\xc1 not a state"),
}


@pytest.mark.parametrize("what", sorted(UNFOLDABLE))
async def test_an_append_the_writer_cannot_fold_is_refused_unwritten(what: str):
    j = Journal(MemoryStore(f"fold-{uuid.uuid4().hex}"))
    w = await j.acquire(KEY, "w")
    await w.append([MessageAppended(Msg("user", "before"))])
    head = w.version
    with pytest.raises(InvalidEventError):
        await w.append([MessageAppended(Msg("user", "with it")), UNFOLDABLE[what]])
    assert w.version == head
    assert await j.head(KEY) == head
    await w.append([MessageAppended(Msg("user", "after"))])
    await w.close()
    texts = [m.text for m in (await Journal(j.store).load(KEY)).context]
    assert texts == ["before", "after"]


async def test_an_unknown_optional_event_is_still_accepted():
    j = Journal(MemoryStore(f"fold-{uuid.uuid4().hex}"))
    optional = ev.UnknownEvent(
        "x.Note", 1, False, msgspec.msgpack.encode({"type": "x.Note"})
    )
    async with j.writer(KEY, "w") as w:
        await w.append([MessageAppended(Msg("user", "hi")), optional])
    assert [m.text for m in (await j.load(KEY)).context] == ["hi"]
