"""A writer's own state is the state every reader rebuilds from what it committed.

The writer folds its commits without reading them back; what it folds must be what
readers decode from the stored bytes, and what it refuses to fold it must refuse to
commit, whichever way an event reaches it.
"""

from __future__ import annotations

import uuid

import msgspec
import pytest

from journal import (
    Journal,
    MessageAppended,
    Msg,
    ThreadKey,
    ThreadWriter,
    ToolCallRequested,
    UnknownEvent,
)
from journal.errors import InvalidEventError
from projections import AgentStateProjection, fold

KEY = ThreadKey("agent", "s1")


def _url() -> str:
    return f"memory://folds-{uuid.uuid4().hex}"


async def _same_everywhere(journal: Journal, mine: object) -> None:
    """``mine`` (the writer's state) is what a load and a replay of the log give."""
    loaded = await Journal.open(journal.store.url).load(KEY)
    records = [r async for r in journal.records(KEY)]
    projection = AgentStateProjection()
    replayed = fold(projection, projection.initial(KEY), records)
    assert msgspec.msgpack.encode(mine) == msgspec.msgpack.encode(loaded)
    assert msgspec.msgpack.encode(mine) == msgspec.msgpack.encode(replayed)
    assert (await journal.verify(KEY)).ok


async def _two_messages() -> tuple[Journal, ThreadWriter]:
    """A fresh journal, and a writer of ``KEY`` that committed messages m1 and m2."""
    journal = Journal.open(_url())
    writer = await journal.acquire(KEY, holder="x")
    await writer.append(
        [
            MessageAppended(Msg("user", "a", id="m1")),
            MessageAppended(Msg("assistant", "b", id="m2")),
        ]
    )
    return journal, writer


async def test_an_unknown_event_at_an_older_schema_is_folded_as_readers_upcast_it():
    journal = Journal.open(_url())
    writer = await journal.acquire(KEY, holder="x")
    await writer.append([ToolCallRequested("c1", "search", {"q": 1})])
    data = msgspec.msgpack.encode(
        {"call_id": "c1", "output": "done", "message_id": "m1"}
    )
    await writer.append([UnknownEvent("ToolCallCompleted", 1, False, data)])
    assert [m.id for m in writer.state.context] == ["m1"]
    assert not writer.state.tool_context.pending_calls
    await _same_everywhere(journal, writer.state)
    await writer.close()


async def test_an_unknown_event_readers_decode_as_a_refused_one_is_refused():
    journal = Journal.open(_url())
    writer = await journal.acquire(KEY, holder="x")
    await writer.append([MessageAppended(Msg("user", "hi", id="m1"))])
    head = await journal.head(KEY)
    data = msgspec.msgpack.encode({"reason": "x", "state": b"", "chunks": ["0" * 64]})
    with pytest.raises(InvalidEventError, match="AgentStateReplaced"):
        await writer.append([UnknownEvent("AgentStateReplaced", 1, False, data)])
    assert await journal.head(KEY) == head
    # The thread is as it was: it loads, and takes the next append.
    await writer.append([MessageAppended(Msg("user", "again", id="m2"))])
    await _same_everywhere(journal, writer.state)
    await writer.close()


async def test_an_update_committing_a_message_readers_refuse_is_refused():
    journal, writer = await _two_messages()
    head = await journal.head(KEY)
    bad = Msg("robot", "c", id="m3")  # type: ignore[arg-type]  # not a Role

    def reorder(state):  # a reorder: committed as AgentStateReplaced
        state.context = [state.context[1], state.context[0], bad]

    with pytest.raises(InvalidEventError, match="robot"):
        await writer.update("reorder", reorder)
    assert await journal.head(KEY) == head
    await _same_everywhere(journal, writer.state)
    await writer.close()


async def test_an_update_folds_copies_of_the_callers_messages():
    journal, writer = await _two_messages()
    mine = Msg("user", "c", id="m3", metadata={"k": "original"})

    def reorder(state):
        state.context = [state.context[1], state.context[0], mine]

    await writer.update("reorder", reorder)
    mine.metadata["k"] = "edited later by the caller"
    assert writer.state.context[2].metadata == {"k": "original"}
    await writer.checkpoint()
    await _same_everywhere(journal, writer.state)
    await writer.close()
