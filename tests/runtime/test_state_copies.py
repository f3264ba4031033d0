"""Copies of a thread's state that share its messages until they are read.

What a tool, a mutation or a caller gets must behave as a deep copy (nothing done to
it reaches the thread's state) while costing nothing per message it does not read.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from journal import (
    Agent,
    Journal,
    ModelResponse,
    Msg,
    RuntimeContext,
    ScriptedModel,
    ToolCall,
    tool,
)
from journal import events as ev
from journal.codec import Record
from journal.runtime import copies
from journal.runtime.copies import (
    SharedMessages,
    StateSnapshot,
    detached,
    state_copy,
)
from projections.agent_state import AgentState, AgentStateProjection

from ._support import all_events, fresh_url, key, names

if TYPE_CHECKING:
    from collections.abc import Callable


def ctx(session: str = "s1") -> RuntimeContext:
    return RuntimeContext(user_id="alice", session_id=session)


def state_with(n: int) -> AgentState:
    state = AgentState(session_id="s1", user_id="alice")
    state.context = [
        Msg("user", [ev.TextBlock(f"m{i}")], metadata={"i": i}) for i in range(n)
    ]
    state.permission_context.rules["shell"] = "ask"
    state.tasks_context.todos = [{"content": "a", "status": "pending"}]
    return state


def raw(messages: list[Msg]) -> list[Msg]:
    """The objects a list holds, past any override of reading."""
    return list.copy(messages)


def vandalize(message: Msg) -> None:
    message.metadata["edited"] = True
    if isinstance(message.content, list):
        message.content.append(ev.TextBlock("edited"))


# --- the copy itself -------------------------------------------------------------


def test_a_copy_shares_the_messages_nobody_read():
    source = state_with(3)
    c = state_copy(source)
    assert type(c.context) is SharedMessages
    assert all(a is b for a, b in zip(raw(c.context), source.context, strict=True))
    first = c.context[0]
    assert first is not source.context[0]
    assert first == source.context[0]
    assert c.context[0] is first  # read once, kept: edits to it stay in the copy
    stored = raw(c.context)
    assert stored[0] is first
    assert stored[1] is source.context[1]
    assert stored[2] is source.context[2]


READS: dict[str, Callable[[list[Msg]], list[Msg]]] = {
    "index": lambda ms: [ms[0], ms[-1]],
    "slice": lambda ms: ms[:],
    "step slice": lambda ms: ms[::2],
    "iteration": lambda ms: [m for m in ms],  # noqa: C416 - iterates on purpose
    "list()": list,
    "unpacking": lambda ms: [*ms],
    "reversed": lambda ms: list(reversed(ms)),
    "pop": lambda ms: [ms.pop(), ms.pop(0)],
    "copy()": lambda ms: ms.copy(),
    "plus": lambda ms: ms + [],  # noqa: RUF005 - the operator on purpose
    "radd": lambda ms: [] + ms,  # noqa: RUF005 - the operator on purpose
    "times": lambda ms: ms * 1,
    "copy.copy": lambda ms: copy.copy(ms),
    "copy.deepcopy": lambda ms: copy.deepcopy(ms),
    "pickle": lambda ms: pickle.loads(pickle.dumps(ms)),  # noqa: S301 - our own bytes
    "sort key": lambda ms: _sorted_seen(ms),
}


def _sorted_seen(messages: list[Msg]) -> list[Msg]:
    seen: list[Msg] = []

    def key(m: Msg) -> int:
        seen.append(m)
        return 0

    messages.sort(key=key)
    return [*seen, *messages]


@pytest.mark.parametrize("read", list(READS), ids=list(READS))
def test_every_way_of_reading_a_copy_hands_out_the_copys_own_messages(read):
    source = state_with(4)
    before = msgspec.msgpack.encode(source)
    c = state_copy(source)
    got = READS[read](c.context)
    assert got
    for message in got:
        vandalize(message)
    for message in c.context:
        vandalize(message)
    assert msgspec.msgpack.encode(source) == before


def test_messages_put_into_a_copy_are_the_holders_own():
    c = state_copy(state_with(2))
    a, b, d, e, f = (Msg("user", x) for x in "abdef")
    c.context.append(a)
    c.context.insert(0, b)
    c.context.extend([d])
    c.context += [e]
    c.context[1] = f
    assert c.context[-1] is e
    assert c.context[-2] is d
    assert c.context[-3] is a
    assert c.context[0] is b
    assert c.context[1] is f
    c.context[2:3] = [a]
    assert c.context[2] is a


def test_a_copy_keeps_nothing_but_messages_in_common_with_its_source():
    source = state_with(1)
    source.tool_context.pending_calls["c1"] = copies_pending()
    c = state_copy(source)
    c.permission_context.rules["shell"] = "allow"
    c.tasks_context.todos[0]["status"] = "completed"
    c.tool_context.pending_calls["c1"].input["x"] = 2
    c.tool_context.active_groups.append("g")
    assert source.permission_context.rules == {"shell": "ask"}
    assert source.tasks_context.todos == [{"content": "a", "status": "pending"}]
    assert source.tool_context.pending_calls["c1"].input == {"x": 1}
    assert source.tool_context.active_groups == []


def copies_pending() -> Any:
    from projections.agent_state import PendingToolCall

    return PendingToolCall("c1", "t", {"x": 1}, "r1", 1)


def test_a_copy_encodes_compares_and_copies_as_its_source():
    source = state_with(3)
    c = state_copy(source)
    assert c.context[1] is not source.context[1]  # one message read, the others not
    assert c == source
    assert c.to_json() == source.to_json()
    assert msgspec.msgpack.encode(c) == msgspec.msgpack.encode(source)
    assert c.copy() == source
    assert type(c.copy().context) is list
    plain = detached(c)
    assert type(plain.context) is list
    assert plain == source


def test_a_copy_of_a_handed_out_copy_does_not_share_its_messages():
    c = state_copy(state_with(2))
    mine = c.context[0]
    again = state_copy(c)
    vandalize(mine)
    assert "edited" not in again.context[0].metadata


def test_a_snapshot_shows_the_state_as_it_was_when_taken():
    state = state_with(2)
    snap = StateSnapshot(state)
    state.context.append(Msg("user", "later"))
    state.summary = "later"
    state.tasks_context.todos[0]["status"] = "completed"
    got = snap.get()
    assert [m.metadata["i"] for m in got.context] == [0, 1]
    assert got.summary is None
    assert got.tasks_context.todos[0]["status"] == "pending"
    assert snap.get() is got
    vandalize(got.context[0])
    assert "edited" not in state.context[0].metadata


def test_committed_state_never_rewrites_its_context_list_in_place():
    # What StateSnapshot and state_copy rely on: each event either appends to the
    # context list or gives the state a new one; the messages there stay put.
    projection = AgentStateProjection()
    state = state_with(3)
    events: list[object] = [
        ev.MessageAppended(Msg("user", "x")),
        ev.ToolCallRequested("c1", "t", {}, run_id="r"),
        ev.ToolCallCompleted("c1", "out", message_id="t1", name="t"),
        ev.ContextCompacted("sum", [state.context[0].id]),
        ev.SummarySet("s"),
        ev.ContextCleared("clear"),
        ev.MessageAppended(Msg("user", "y")),
    ]
    for version, event in enumerate(events, start=1):
        before_list = state.context
        before = list(before_list)
        record = Record(version, 0, "", "", None, 0.0, "", "", [event])
        state = projection.apply(state, record, event)
        assert all(a is b for a, b in zip(before_list, before, strict=False))
        assert len(before_list) >= len(before)
        if state.context is not before_list:
            assert len(before_list) == len(before)


# --- what the runtime hands out --------------------------------------------------


def journal_agent(model, tools=(), **kw) -> tuple[Agent, Journal]:
    j = Journal.open(fresh_url())
    return Agent("A", "assistant", model, tools=tools, journal=j, **kw), j


async def kept_state(agent: Agent, c: RuntimeContext) -> AgentState:
    """The state of the writer the agent keeps (``get_agent_state`` reads the log)."""
    return await agent.update_agent_state(c, "look", lambda _: None)


def calls_then(*tool_names: str, reply: str = "done") -> ScriptedModel:
    script: list = [
        ModelResponse(tool_calls=[ToolCall(n, {}, id=f"c{i}")])
        for i, n in enumerate(tool_names)
    ]
    script.append(reply)
    return ScriptedModel(script)


async def test_a_tools_edits_are_its_own_until_it_returns():
    holder: dict[str, Agent] = {}
    seen: dict[str, Any] = {}

    async def edit(ctx: RuntimeContext) -> str:
        """Edit the state directly, then look at the thread's."""
        state = ctx.agent_state
        assert state is not None
        state.summary = "mine"
        vandalize(state.context[0])
        committed = await holder["agent"].get_agent_state(ctx)
        seen["summary"] = committed.summary
        seen["metadata"] = dict(committed.context[0].metadata)
        return "edited"

    agent, j = journal_agent(calls_then("edit"), [edit])
    holder["agent"] = agent
    await agent.call("go", ctx())
    assert seen == {"summary": None, "metadata": {}}
    # Committed when the tool returned: a message edit needs a whole-state record.
    state = await agent.get_agent_state(ctx())
    assert state.summary == "mine"
    assert state.context[0].metadata == {"edited": True}
    await agent.close()
    replayed = await j.load(key())
    assert replayed.summary == "mine"
    assert replayed.context[0].metadata == {"edited": True}
    assert "AgentStateReplaced" in names(await all_events(j, key()))
    assert (await j.verify(key())).ok


async def test_a_tool_cut_short_commits_none_of_its_edits():
    started = asyncio.Event()

    async def stall(ctx: RuntimeContext) -> str:
        """Edit the state, then never return."""
        state = ctx.agent_state
        assert state is not None
        state.summary = "mine"
        vandalize(state.context[0])
        started.set()
        await asyncio.Event().wait()
        return "never"

    agent, j = journal_agent(calls_then("stall"), [stall])
    run = agent.prepare_call("go", ctx())
    result = asyncio.ensure_future(run.result())
    await asyncio.wait_for(started.wait(), 10)
    assert run.interrupt("stop")
    reply = await asyncio.wait_for(result, 10)
    assert reply.metadata["interrupted"]
    state = await kept_state(agent, ctx())
    assert state.summary is None
    assert state.context[0].metadata == {}
    await agent.close()
    replayed = await j.load(key())
    assert replayed.summary is None
    assert replayed.context[0].metadata == {}


async def test_a_refused_edit_commits_nothing_of_the_tools_view():
    async def overreach(ctx: RuntimeContext) -> str:
        """Set the summary, and end the run by hand (only the log may)."""
        state = ctx.agent_state
        assert state is not None
        state.summary = "mine"
        state.active_run_id = None
        return "done"

    agent, j = journal_agent(calls_then("overreach"), [overreach])
    await agent.call("go", ctx())
    await agent.close()
    state = await j.load(key())
    assert state.summary is None
    done = [
        e for _, e in await all_events(j, key()) if isinstance(e, ev.ToolCallCompleted)
    ]
    assert done[0].is_error
    assert "refused" in str(done[0].output)


async def test_a_failing_mutation_leaves_the_state_untouched():
    async def fail(ctx: RuntimeContext) -> str:
        """Start a change and give it up half way."""

        def change(state: AgentState) -> None:
            state.summary = "half"
            vandalize(state.context[0])
            raise RuntimeError("given up")

        try:
            await ctx.update_state("half", change)
        except RuntimeError:
            return "gave up"
        return "unexpected"

    agent, j = journal_agent(calls_then("fail"), [fail])
    await agent.call("go", ctx())
    state = await kept_state(agent, ctx())
    assert state.summary is None
    assert state.context[0].metadata == {}
    await agent.close()
    assert (await j.load(key())).summary is None
    assert "SummarySet" not in names(await all_events(j, key()))


async def test_the_state_a_call_leaves_on_the_context_is_the_callers_own():
    agent, j = journal_agent(ScriptedModel(["one", "two"]))
    first = ctx()
    await agent.call("hi", first)
    assert first.agent_state is not None
    first.agent_state.summary = "not recorded"
    vandalize(first.agent_state.context[0])
    second = ctx()
    await agent.call("again", second)
    assert second.agent_state is not None
    assert second.agent_state.summary is None
    assert second.agent_state.context[0].metadata == {}
    assert [m.text for m in second.agent_state.context] == ["hi", "one", "again", "two"]
    # The first call's state is as that call left it.
    assert [m.text for m in first.agent_state.context] == ["hi", "one"]
    await agent.close()
    assert await j.load(key()) == second.agent_state


async def test_concurrent_calls_on_two_threads_share_no_state():
    both = asyncio.Barrier(2)
    views: dict[str, AgentState] = {}

    async def mark(ctx: RuntimeContext) -> str:
        """Mark this thread's state, wait for the other thread, look again."""
        state = ctx.agent_state
        assert state is not None
        assert ctx.session_id is not None
        state.summary = ctx.session_id
        state.context.append(Msg("user", f"note {ctx.session_id}"))
        state.context[0].metadata["by"] = ctx.session_id
        views[ctx.session_id] = state
        await asyncio.wait_for(both.wait(), 10)
        assert state.summary == ctx.session_id
        assert state.context[0].metadata == {"by": ctx.session_id}
        return "marked"

    agent, j = journal_agent(
        ScriptedModel([_call("mark"), _call("mark"), "done", "done"]), [mark]
    )
    await asyncio.gather(agent.call("go a", ctx("a")), agent.call("go b", ctx("b")))
    assert views["a"] is not views["b"]
    await agent.close()
    for session in ("a", "b"):
        state = await j.load(key(session))
        assert state.summary == session
        assert state.context[0].metadata == {"by": session}
        texts = [m.text for m in state.context]
        assert f"note {session}" in texts
        assert all("note" not in t or t.endswith(session) for t in texts)


def _call(name: str) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(name, {})])


async def test_a_warm_call_copies_no_message_it_does_not_read(monkeypatch):
    """A tool that writes todos, changes state and reads the summary costs no copy."""
    counts = {"messages": 0, "states": 0}
    copy_message = copies.copy_message
    deep_copy = AgentState.copy

    def counted_message(message: Msg) -> Msg:
        counts["messages"] += 1
        return copy_message(message)

    def counted_state(self: AgentState) -> AgentState:
        counts["states"] += 1
        return deep_copy(self)

    async def work(ctx: RuntimeContext) -> str:
        """What the benchmark's tool does, and a look at the state."""
        await ctx.tasks.write_todos([{"content": "a", "status": "pending"}])

        def change(state: AgentState) -> None:
            state.plan_mode_context.active = True
            state.summary = "s"

        after = await ctx.update_state("side state", change)
        state = ctx.agent_state
        assert state is not None
        return f"{state.summary} {len(state.context)} {after.version}"

    script: list = []
    for _ in range(20):
        script += [_call("work"), "answer"]
    # Read-only, as the benchmark's tool is, so that plan mode keeps offering it.
    agent, j = journal_agent(ScriptedModel(script), [tool(work, read_only=True)])
    for i in range(19):
        await agent.call(f"turn {i}", ctx())
    monkeypatch.setattr(copies, "copy_message", counted_message)
    monkeypatch.setattr(AgentState, "copy", counted_state)
    c = ctx()
    await agent.call("the warm turn", c)
    assert counts == {"messages": 0, "states": 0}
    # Reading the result copies only what is read.
    assert c.agent_state is not None
    assert c.agent_state.context[-1].text == "answer"
    assert counts == {"messages": 1, "states": 0}
    monkeypatch.undo()
    await agent.close()
    results = [
        e.output
        for _, e in await all_events(j, key())
        if isinstance(e, ev.ToolCallCompleted)
    ]
    assert len(results) == 20
    assert all(str(r).startswith("s ") for r in results)  # no tool was refused
    assert results[-1].startswith("s 78 ")  # 19 turns of 4 messages, and 2 more
