"""Snapshot mode: Agent(state_store=...) with each conflict policy."""

from __future__ import annotations

import asyncio

import pytest

from journal import (
    Agent,
    ModelResponse,
    Msg,
    RuntimeContext,
    ScriptedModel,
    StaleStateError,
    ThreadKey,
    ToolCall,
    UncertainToolCallsError,
)
from projections import PendingToolCall
from stores.state import ConflictPolicy, InMemoryAgentStateStore

KEY = ThreadKey("assistant", "s1", "alice")
ENTRY = KEY.state_entry("agent_state")


def ctx() -> RuntimeContext:
    return RuntimeContext(user_id="alice", session_id="s1")


class TrackingStore(InMemoryAgentStateStore):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


async def slot(store) -> tuple[list[str], int]:
    loaded = await store.load("alice", "s1", ENTRY)
    assert loaded is not None
    state, version = loaded
    return [m.text for m in state.context], version


async def test_fresh_agents_continue_a_session_through_the_store():
    store = TrackingStore()

    def echo(word: str) -> str:
        """Echo."""
        return word

    first = Agent(
        "A",
        "assistant",
        ScriptedModel(
            [ModelResponse(tool_calls=[ToolCall("echo", {"word": "hey"})]), "one"]
        ),
        tools=[echo],
        state_store=store,
    )
    async with first:
        assert (await first.call("hi", ctx())).text == "one"
    assert not store.closed  # an Agent does not close a store it was given
    texts, version = await slot(store)
    assert texts == ["hi", "", "", "one"]
    assert version == 1

    seen: list[list[Msg]] = []

    def answer(messages):
        seen.append(messages)
        return "two"

    second = Agent("A", "assistant", ScriptedModel([answer]), state_store=store)
    c = ctx()
    await second.call("again", c)
    assert [m.text for m in seen[0]] == ["hi", "", "", "one", "again"]
    assert (await slot(store))[1] == 2
    assert c.agent_state is not None
    assert c.agent_state.version == 2
    state = await second.get_agent_state("alice", "s1")
    assert state.version == 2
    assert state.active_run_id is None


async def racing_turns(policy: ConflictPolicy, store, *, clear_in_turn: bool = False):
    """Turn A loads, turn B (another instance) saves, then A saves: a conflict."""
    in_model = asyncio.Event()
    release = asyncio.Event()

    async def slow_model(messages, tools):
        if clear_in_turn and messages[-1].role == "user":
            return ModelResponse(tool_calls=[ToolCall("compact", {})])
        return await finish()

    async def finish():
        in_model.set()
        await release.wait()
        return ModelResponse(text="reply A")

    def compact(ctx: RuntimeContext) -> str:
        """Summarize and drop the context (changes it beyond appending)."""
        assert ctx.agent_state is not None
        ctx.agent_state.context.clear()
        ctx.agent_state.summary = "compacted"
        return "compacted"

    a = Agent(
        "A",
        "assistant",
        slow_model,
        tools=[compact],
        state_store=store,
        conflict_policy=policy,
    )
    b = Agent("A", "assistant", ScriptedModel(["reply B"]), state_store=store)
    task = asyncio.create_task(a.call("from A", ctx()))
    await asyncio.wait_for(in_model.wait(), 5)
    await b.call("from B", ctx())
    release.set()
    return task


async def seeded() -> InMemoryAgentStateStore:
    store = InMemoryAgentStateStore()
    agent = Agent("A", "assistant", ScriptedModel(["base reply"]), state_store=store)
    await agent.call("base", ctx())
    return store


async def test_fail_policy_raises_stale_state_and_keeps_the_other_turn():
    store = await seeded()
    task = await racing_turns(ConflictPolicy.FAIL, store)
    with pytest.raises(StaleStateError):
        await task
    texts, version = await slot(store)
    assert texts == ["base", "base reply", "from B", "reply B"]
    assert version == 2


async def test_overwrite_policy_is_last_writer_wins():
    store = await seeded()
    task = await racing_turns(ConflictPolicy.OVERWRITE, store)
    assert (await task).text == "reply A"
    texts, version = await slot(store)
    assert texts == ["base", "base reply", "from A", "reply A"]
    assert version == 3


async def test_append_merge_appends_this_turn_after_the_slot():
    store = await seeded()
    task = await racing_turns("append_merge", store)  # the value works too
    assert (await task).text == "reply A"
    texts, version = await slot(store)
    assert texts == ["base", "base reply", "from B", "reply B", "from A", "reply A"]
    assert version == 3


async def test_append_merge_refuses_a_turn_that_changed_the_context():
    store = await seeded()
    task = await racing_turns(ConflictPolicy.APPEND_MERGE, store, clear_in_turn=True)
    with pytest.raises(StaleStateError, match="merged"):
        await task
    texts, _ = await slot(store)
    assert texts == ["base", "base reply", "from B", "reply B"]


async def test_snapshot_state_operations():
    store = InMemoryAgentStateStore()
    agent = Agent("A", "assistant", ScriptedModel(["hello"]), state_store=store)
    await agent.call("hi", ctx())
    state = await agent.get_agent_state(ctx())
    stale = state.copy()

    def allow(s):
        s.permission_context.rules["read"] = "allow"

    updated = await agent.update_agent_state(ctx(), "allow reads", allow)
    assert updated.permission_context.rules == {"read": "allow"}
    with pytest.raises(StaleStateError):
        await agent.save_agent_state(ctx(), stale)
    current = await agent.get_agent_state(ctx())
    current.summary = "greetings exchanged"
    saved = await agent.save_agent_state(ctx(), current)
    assert saved.summary == "greetings exchanged"
    cleared = await agent.clear_context("alice", "s1")
    assert cleared.context == []
    assert cleared.summary is None
    assert cleared.permission_context.rules == {"read": "allow"}

    # Uncertain calls in a slot (e.g. imported from a journal) block runs until
    # reconciled, exactly as in journal mode.
    def add_pending(s):
        s.tool_context.pending_calls["x1"] = PendingToolCall(
            "x1", "send", {"to": "bob"}
        )

    await agent.update_agent_state(ctx(), "import", add_pending)
    assert [c.call_id for c in await agent.pending_tool_calls(ctx())] == ["x1"]
    with pytest.raises(UncertainToolCallsError):
        await agent.call("hi", ctx())
    with pytest.raises(ValueError, match="x1"):
        await agent.reconcile_tool_calls(ctx(), {}, "checked")
    state = await agent.reconcile_tool_calls(ctx(), {"x1": "sent"}, "checked")
    assert state.tool_context.pending_calls == {}
    assert state.context[-1].content[0].output == "sent"


def test_unknown_conflict_policy_is_rejected():
    with pytest.raises(ValueError, match="conflict_policy"):
        Agent(
            "A",
            "assistant",
            ScriptedModel([]),
            state_store=InMemoryAgentStateStore(),
            conflict_policy="merge-ish",
        )
