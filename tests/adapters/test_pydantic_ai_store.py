"""JournalConversationStore: pydantic-ai's conversation store on the journal."""

from __future__ import annotations

import copy
import uuid

import pytest

pytest.importorskip("pydantic_ai.conversation_store")

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    InMemoryConversationStore,
)
from pydantic_ai.models.test import TestModel

from journal import Journal, ThreadKey
from journal.adapters.pydantic_ai import JournalConversationStore
from journal.errors import LeaseHeldError


@pytest.fixture
async def journal():
    async with Journal.open(f"memory://pai-{uuid.uuid4().hex}") as j:
        yield j


@pytest.fixture
def agent():
    return Agent(TestModel(custom_output_text="ok"))


async def _turn(store, agent, cid, prompt, **kw):
    conversation = await store.load(cid, **kw) or Conversation(conversation_id=cid)
    result = await agent.run(prompt, conversation=conversation)
    await store.save(result, **kw)
    return result


async def test_round_trip_and_revision_is_the_journals(journal, agent):
    store = JournalConversationStore(journal)
    await _turn(store, agent, "c1", "hello")
    await _turn(store, agent, "c1", "again")
    loaded = await store.load("c1")
    assert loaded is not None
    texts = [
        p.content for m in loaded.messages for p in m.parts if hasattr(p, "content")
    ]
    assert "hello" in texts
    assert "again" in texts
    head = await journal.head(ThreadKey(agent_id="pydantic-ai", session_id="c1"))
    assert loaded.revision.startswith(f"{head}-")
    # A second store (another process) reads the same conversation.
    other = JournalConversationStore(journal)
    again = await other.load("c1")
    assert again is not None
    assert again.revision == loaded.revision
    assert len(again.messages) == len(loaded.messages)
    assert [e.message for e in await other.load_entries("c1", limit=2)] == (
        loaded.messages[-2:]
    )


async def test_stale_revision_is_a_conflict_and_writes_nothing(journal, agent):
    store = JournalConversationStore(journal)
    await _turn(store, agent, "c", "one")
    first = await store.load("c")
    second = await JournalConversationStore(journal).load("c")
    key = ThreadKey(agent_id="pydantic-ai", session_id="c")
    result = await agent.run("from first", conversation=first)
    await store.save(result)
    head = await journal.head(key)
    stale = await agent.run("from second", conversation=second)
    with pytest.raises(ConversationConflict):
        await JournalConversationStore(journal).save(stale)
    assert await journal.head(key) == head


async def test_new_conversation_over_an_existing_id_conflicts(journal, agent):
    store = JournalConversationStore(journal)
    await _turn(store, agent, "dup", "one")
    fresh = await agent.run("two", conversation=Conversation(conversation_id="dup"))
    with pytest.raises(ConversationConflict):
        await JournalConversationStore(journal).save(fresh)


async def test_delete_and_recreate_gets_a_new_revision(journal, agent):
    store = JournalConversationStore(journal)
    await _turn(store, agent, "d", "one")
    before = await store.load("d")
    await store.delete("d")
    assert await store.load("d") is None
    await _turn(store, agent, "d", "two")
    after = await store.load("d")
    assert after.revision != before.revision
    result = await agent.run("three", conversation=before)
    with pytest.raises(ConversationConflict):
        await store.save(result)
    # The log keeps every record: the deletion is an event, not a rewrite.
    key = ThreadKey(agent_id="pydantic-ai", session_id="d")
    kinds = [type(e).__name__ async for r in journal.records(key) for e in r.events]
    assert "ConversationDeleted" in kinds


async def test_fork_branch_scope_and_listing(journal, agent):
    store = JournalConversationStore(journal)
    await _turn(store, agent, "src", "root", scope="alice")
    await _turn(store, agent, "src", "more", scope="alice")
    fork = await store.fork("src", at=2, new_conversation_id="fk", scope="alice")
    assert len(fork.messages) == 2
    # Another store (another process) reads the fork's history from src's thread.
    loaded = await JournalConversationStore(journal).load("fk")
    assert loaded.messages == fork.messages
    assert await store.load("src", scope="bob") is None
    listed = await store.list_conversations(scope="alice")
    assert {c.conversation_id for c in listed} == {"src", "fk"}
    current = await store.load("src")
    branched = await store.branch("src", at=2, expected_revision=current.revision)
    assert len(branched.messages) == 2
    record = await store.read_record("src")
    assert record.branches


async def test_lease_held_elsewhere_is_a_conflict(journal, agent):
    key = ThreadKey(agent_id="pydantic-ai", session_id="held")
    async with journal.writer(key, holder="someone-else"):
        store = JournalConversationStore(journal, lease_wait=0)
        result = await agent.run("x", conversation=Conversation(conversation_id="held"))
        with pytest.raises(ConversationConflict) as info:
            await store.save(result)
        assert isinstance(info.value.__cause__, LeaseHeldError)


async def test_thread_key_scopes_by_user(journal, agent):
    store = JournalConversationStore(
        journal,
        thread_key=lambda cid: ThreadKey(
            agent_id="chat", user_id=cid.split(":")[0], session_id=cid.split(":")[1]
        ),
    )
    await _turn(store, agent, "alice:s1", "hi")
    keys = [k async for k in journal.threads()]
    assert keys == [ThreadKey(agent_id="chat", user_id="alice", session_id="s1")]


@pytest.fixture(params=["in-memory", "journal"])
def any_store(request, journal):
    """pydantic-ai's reference store, then the journal's: both must behave alike."""
    if request.param == "in-memory":
        return InMemoryConversationStore()
    return JournalConversationStore(journal)


def _snapshot(conversation):
    return (
        copy.deepcopy(conversation.messages),
        copy.deepcopy(conversation.usage),
        conversation.revision,
    )


async def test_loads_share_nothing_with_the_store(any_store, agent):
    store = any_store
    await _turn(store, agent, "c", "hello", scope="alice")
    saved = _snapshot(await store.load("c"))
    # What a caller changes in place on what it loaded, and a run continuing it,
    # stays in its copy until it is saved.
    draft = await store.load("c")
    draft.messages[0].parts[0].content = "EDITED, NEVER SAVED"
    draft.usage.requests += 10
    await agent.run("not saved", conversation=draft)
    (entry,) = await store.load_entries("c", limit=1)
    entry.message.parts[0].content = "EDITED ENTRY"
    record = await store.read_record("c")
    record.branches.append("nowhere")
    record.usage.input_tokens += 1000
    (listed,) = await store.list_conversations(scope="alice")
    listed.branches.append("elsewhere")
    listed.usage.output_tokens += 1000
    read = await store.read_entry(entry.id)
    read.message.parts[0].content = "EDITED READ"
    history = await store.read_history(record.head_id)
    history[0].message.parts[0].content = "EDITED HISTORY"
    assert _snapshot(await store.load("c")) == saved
    assert (await store.read_record("c")).branches == []
    assert (await store.load_entries("c", limit=1))[0] == (
        await store.read_entry(entry.id)
    )


async def test_an_in_place_rewrite_of_a_loaded_history_is_saved(any_store, agent):
    store = any_store
    await _turn(store, agent, "c", "hello")
    draft = await store.load("c")
    draft.messages[0].parts[0].content = "rewritten"
    # A copy of the messages (as after a round trip through JSON) is compared with
    # the stored history by ==: the rewrite must not compare equal to it.
    rewritten = Conversation(
        conversation_id="c",
        messages=copy.deepcopy(draft.messages),
        revision=draft.revision,
    )
    new_entries = await store.save(rewritten)
    assert len(new_entries) == len(draft.messages)
    loaded = await store.load("c")
    assert loaded.messages[0].parts[0].content == "rewritten"
    assert len((await store.read_record("c")).branches) == 1
