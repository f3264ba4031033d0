"""JournalSession beyond the SDK's suite: history kept, compaction, leases, cancels."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIResponsesCompactionSession, Runner
from agents.memory import SQLiteSession, is_openai_responses_compaction_aware_session
from agents.memory.session_settings import SessionSettings
from agents.testing import ScriptedModel
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from journal import Journal, ThreadKey
from journal.adapters.openai_agents import (
    AgentsItemPopped,
    AgentsItemsAdded,
    AgentsSessionCleared,
    JournalSession,
    SessionConflictError,
)
from journal.errors import FencedError, LeaseHeldError


def _msg(text: str) -> dict:
    return {"role": "user", "content": text}


@pytest.fixture
async def journal(tmp_path):
    async with Journal.open(str(tmp_path / "journal")) as j:
        yield j


async def _kinds(journal, key):
    return [type(e).__name__ async for r in journal.records(key) for e in r.events]


async def test_pops_and_clears_are_events_and_the_log_keeps_the_items(journal):
    session = JournalSession("s", journal)
    await session.add_items([_msg("a"), _msg("b"), _msg("c")])
    assert await session.pop_item() == _msg("c")
    assert await session.get_items() == [_msg("a"), _msg("b")]
    assert await session.get_items(limit=1) == [_msg("b")]
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    key = ThreadKey(agent_id="openai-agents", session_id="s")
    kinds = await _kinds(journal, key)
    for event in (AgentsItemsAdded, AgentsItemPopped, AgentsSessionCleared):
        assert event.__name__ in kinds
    added = [
        item
        async for r in journal.records(key)
        for e in r.events
        if isinstance(e, AgentsItemsAdded)
        for item in e.items
    ]
    assert len(added) == 3
    # An empty pop or clear commits nothing.
    head = await journal.head(key)
    await session.clear_session()
    await session.pop_item()
    assert await journal.head(key) == head


async def test_a_closed_session_refuses_even_an_empty_add(journal):
    session = JournalSession("closed", journal)
    session.close()
    with pytest.raises(RuntimeError, match="is closed"):
        await session.add_items([])


async def test_a_cancelled_write_settles_before_the_cancel_propagates(journal):
    session = JournalSession("cancel", journal)
    task = asyncio.ensure_future(session.add_items([_msg("x")]))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The commit either landed whole or not at all, and its outcome is known now.
    assert await session.get_items() in ([], [_msg("x")])
    other = JournalSession("cancel", journal)
    assert await other.get_items() == await session.get_items()


async def test_a_runner_turn_uses_the_session(journal):
    session = JournalSession("runner", journal)
    model = ScriptedModel()
    model.enqueue(
        [
            ResponseOutputMessage(
                id="1",
                type="message",
                role="assistant",
                content=[
                    ResponseOutputText(
                        text="hello there", type="output_text", annotations=[]
                    )
                ],
                status="completed",
            )
        ]
    )
    agent = Agent(name="a", model=model)
    await Runner.run(agent, "hi", session=session)
    items = await session.get_items()
    assert items[0]["content"] == "hi"
    assert len(items) == 2


async def test_compaction_replaces_the_suffix_only_if_unchanged(journal):
    session = JournalSession("compact", journal)
    assert is_openai_responses_compaction_aware_session(
        OpenAIResponsesCompactionSession(
            session_id="compact", underlying_session=session
        )
    )
    await session.add_items([_msg(str(i)) for i in range(4)])
    snapshot = await session._get_compaction_snapshot(2)
    assert snapshot.items == [_msg("2"), _msg("3")]
    assert not snapshot.complete
    assert await snapshot.replace_suffix(0, [_msg("summary")])
    assert await session.get_items() == [_msg("0"), _msg("1"), _msg("summary")]
    # A snapshot that another writer's append made stale replaces nothing.
    stale = await session._get_compaction_snapshot(10)
    assert stale.complete
    await JournalSession("compact", journal).add_items([_msg("late")])
    assert not await stale.replace_suffix(0, [_msg("lost?")])
    assert (await session.get_items())[-1] == _msg("late")


async def test_compaction_prunes_an_expired_prefix(journal):
    session = JournalSession("prune", journal)
    await session.add_items([_msg("old"), _msg("old"), _msg("keep"), _msg("x")])
    snapshot = await session._get_compaction_snapshot(
        1, prune_prefix=lambda item: item["content"] == "old"
    )
    assert await snapshot.replace_suffix(0, [_msg("y")])
    assert await session.get_items() == [_msg("keep"), _msg("y")]


async def test_lease_errors_are_the_sdks(tmp_path):
    root = str(tmp_path / "j")
    async with Journal.open(root) as j1, Journal.open(root) as j2:
        keeper = JournalSession("held", j1, holder="node-a", keep=True)
        await keeper.add_items([_msg("a")])
        blocked = JournalSession("held", j2, holder="node-b", lease_wait=0)
        with pytest.raises(SessionConflictError) as info:
            await blocked.add_items([_msg("b")])
        assert isinstance(info.value.__cause__, LeaseHeldError)
        # node-a restarted (same holder) takes over: the old writer is fenced.
        restarted = JournalSession("held", j2, holder="node-a", keep=True)
        await restarted.add_items([_msg("c")])
        with pytest.raises(SessionConflictError) as info:
            await keeper.add_items([_msg("zombie")])
        assert isinstance(info.value.__cause__, FencedError)
        assert await restarted.get_items() == [_msg("a"), _msg("c")]
        await restarted.aclose()
        await keeper.aclose()


async def test_thread_key_scopes_sessions(journal):
    session = JournalSession(
        "s1",
        journal,
        thread_key=lambda sid: ThreadKey(
            agent_id="support", user_id="u7", session_id=sid
        ),
    )
    await session.add_items([_msg("a")], wrapper=None)
    assert [k async for k in journal.threads()] == [
        ThreadKey(agent_id="support", user_id="u7", session_id="s1")
    ]


async def test_memory_journal_sessions_are_separate():
    async with Journal.open(f"memory://{uuid.uuid4().hex}") as journal:
        a, b = JournalSession("a", journal), JournalSession("b", journal)
        await a.add_items([_msg("1")])
        assert await b.get_items() == []


async def test_one_session_written_from_threads_with_their_own_loops(tmp_path):
    # The SDK's sync entry points run a loop per thread: one session object must not
    # take its own lease over from loop to loop (each would fence the other).
    root = str(tmp_path / "threads")
    async with Journal.open(root) as journal:
        session = JournalSession("t", journal, lease_wait=60.0)
        errors: list[BaseException] = []

        def add(i: int) -> None:
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(session.add_items([_msg(f"m{i}")]))
            except BaseException as exc:
                errors.append(exc)
            finally:
                loop.close()

        with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
            list(pool.map(add, range(20)))
        assert errors == []
        items = await JournalSession("t", journal).get_items()
        assert sorted(i["content"] for i in items) == sorted(f"m{i}" for i in range(20))


@pytest.fixture(params=["sqlite", "journal"])
async def two_handles(request, tmp_path, journal):
    """Two session objects on one session id (two writers), SDK's SQLite then ours."""
    if request.param == "sqlite":
        db = str(tmp_path / "sessions.db")
        handles = (SQLiteSession("s", db), SQLiteSession("s", db))
        yield handles
        for handle in handles:
            handle.close()
    else:
        yield JournalSession("s", journal), JournalSession("s", journal)


_HI = {"role": "user", "content": "status?"}
_OK = {"role": "assistant", "content": "all green"}
_SUMMARY = {"role": "assistant", "content": "summary"}


async def test_compaction_refuses_a_suffix_another_writer_repeated(two_handles):
    session, other = two_handles
    await session.add_items([_HI, _OK])
    snapshot = await session._get_compaction_snapshot(10)
    assert snapshot.items == [_HI, _OK]
    # Equal items appended meanwhile are other items: compacting must not take them.
    await other.add_items([_HI, _OK])
    assert not await snapshot.replace_suffix(0, [_SUMMARY])
    assert await session.get_items() == [_HI, _OK, _HI, _OK]


async def test_compaction_refuses_a_suffix_popped_and_added_again(two_handles):
    session, other = two_handles
    await session.add_items([_HI, _OK])
    snapshot = await session._get_compaction_snapshot(10)
    assert await other.pop_item() == _OK
    await other.add_items([_OK])
    assert not await snapshot.replace_suffix(1, [_SUMMARY])
    assert await session.get_items() == [_HI, _OK]
    # A snapshot read now (by a session that folds the log afresh) still replaces.
    fresh = await other._get_compaction_snapshot(10)
    assert await fresh.replace_suffix(1, [_SUMMARY])
    assert await session.get_items() == [_HI, _SUMMARY]


async def test_a_negative_limit_is_no_limit_as_in_sqlite(two_handles):
    session, _ = two_handles
    items = [_msg(f"m{i}") for i in range(4)]
    await session.add_items(items)
    assert await session.get_items(-1) == items
    assert await session.get_items(-3) == items
    assert await session.get_items(0) == []
    assert await session.get_items(2) == items[2:]
    session.session_settings = SessionSettings(limit=-2)
    assert await session.get_items() == items
