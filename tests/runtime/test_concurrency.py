"""Parallel sessions, per-thread serialization, leases, interrupts and shutdown."""

from __future__ import annotations

import asyncio

import pytest

from journal import (
    Agent,
    Journal,
    LeaseHeldError,
    ModelResponse,
    Msg,
    RunInterrupted,
    RunStarted,
    RuntimeContext,
    ScriptedModel,
    ToolCall,
    ToolCallCompleted,
)
from stores.memory import MemoryStore

from ._support import all_events, fresh_url, key, names


def ctx(session: str = "s1", user: str = "alice", **kw) -> RuntimeContext:
    return RuntimeContext(user_id=user, session_id=session, **kw)


async def test_different_sessions_run_concurrently():
    j = Journal.open(fresh_url())
    barrier = asyncio.Barrier(2)

    async def model(messages, tools):
        # Both calls must be inside the model at once to pass the barrier.
        await asyncio.wait_for(barrier.wait(), timeout=5)
        return ModelResponse(text=f"re: {messages[-1].text}")

    agent = Agent("A", "assistant", model, journal=j)
    a, b = await asyncio.gather(
        agent.call("one", ctx("s1")), agent.call("two", ctx("s2", user="bob"))
    )
    assert (a.text, b.text) == ("re: one", "re: two")


async def test_calls_on_one_thread_are_serialized_inside_an_instance():
    j = Journal.open(fresh_url())
    active = 0
    peak = 0

    async def model(messages, tools):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.02)
        active -= 1
        return ModelResponse(text=f"re: {messages[-1].text}")

    agent = Agent("A", "assistant", model, journal=j)
    replies = await asyncio.gather(*(agent.call(f"m{i}", ctx()) for i in range(4)))
    assert peak == 1
    assert sorted(r.text for r in replies) == ["re: m0", "re: m1", "re: m2", "re: m3"]
    # Each run's frame closes before the next one starts.
    frames = [
        type(e).__name__
        for _, e in await all_events(j, key())
        if type(e).__name__ in ("RunStarted", "RunCompleted")
    ]
    assert frames == ["RunStarted", "RunCompleted"] * 4


async def test_second_instance_gets_lease_held_error_or_waits():
    url = fresh_url()
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(ctx: RuntimeContext) -> str:
        """Hold the thread for a while."""
        started.set()
        await release.wait()
        return "done"

    first = Agent(
        "A",
        "assistant",
        ScriptedModel([ModelResponse(tool_calls=[ToolCall("slow", {})]), "first done"]),
        tools=[slow],
        journal=Journal.open(url),
    )
    task = asyncio.create_task(first.call("go", ctx()))
    await asyncio.wait_for(started.wait(), 5)
    counting = ScriptedModel(["second"])
    second = Agent("A", "assistant", counting, journal=Journal.open(url))
    assert second.holder != first.holder
    with pytest.raises(LeaseHeldError) as info:
        await second.call("me too", ctx())
    assert info.value.holder == first.holder
    assert counting.calls == []
    # Another session of the same user is not blocked.
    assert (await second.call("other", ctx("s2"))).text == "second"

    waiting = Agent(
        "A",
        "assistant",
        ScriptedModel(["waited"]),
        journal=Journal.open(url),
        lease_wait=5,
    )
    waiter = asyncio.create_task(waiting.call("after you", ctx()))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    release.set()
    assert (await task).text == "first done"
    assert (await waiter).text == "waited"
    # The lease is held only during operations: now anyone may write.
    assert (await first.clear_context(ctx())).context == []


async def test_interrupt_mid_tool_records_and_the_session_stays_usable():
    j = Journal.open(fresh_url())
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def long_job(ctx: RuntimeContext) -> str:
        """Run for a long time."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    model = ScriptedModel(
        [
            ModelResponse("starting", [ToolCall("long_job", {}, id="job-1")]),
            "fresh reply",
        ]
    )
    agent = Agent("A", "assistant", model, tools=[long_job], journal=j)
    assert agent.interrupt("alice", "s1") is False  # nothing is running
    task = asyncio.create_task(agent.call("start the job", ctx()))
    await asyncio.wait_for(started.wait(), 5)
    assert agent.interrupt("bob", "s1") is False  # another user's session
    assert agent.interrupt("alice", "s1", "user pressed stop") is True
    reply = await asyncio.wait_for(task, 5)
    assert cancelled.is_set()
    assert reply.metadata["interrupted"] is True
    assert "user pressed stop" in reply.text

    events = await all_events(j, key())
    interrupted = [e for _, e in events if isinstance(e, RunInterrupted)]
    assert len(interrupted) == 1
    assert interrupted[0].by == "user"
    assert interrupted[0].reason == "user pressed stop"
    result = next(e for _, e in events if isinstance(e, ToolCallCompleted))
    assert result.call_id == "job-1"
    assert result.is_error
    assert "side effects" in result.output
    assert "not verified" in result.output
    assert names(events)[-2:] == ["MessageAppended", "RunInterrupted"]
    state = await agent.get_agent_state("alice", "s1")
    # A user's interrupt is not a recovery marker (a shutdown's is).
    assert not state.shutdown_interrupted
    assert state.active_run_id is None
    assert state.tool_context.pending_calls == {}
    assert state.context[-1].metadata == {"interrupted": True, "by": "user"}

    # The next call works, and completing it clears shutdown_interrupted.
    assert (await agent.call("hello again", ctx())).text == "fresh reply"
    state = await agent.get_agent_state("alice", "s1")
    assert not state.shutdown_interrupted


async def test_interrupt_before_the_next_tool_and_during_the_model_call():
    j = Journal.open(fresh_url())
    ran: list[str] = []
    agent: Agent

    def first() -> str:
        """Runs, then the user interrupts."""
        ran.append("first")
        return "ok"

    def second() -> str:
        """Must not run."""
        ran.append("second")
        return "ok"

    async def stopper() -> str:
        """Has its session interrupted just after it returns."""
        ran.append("stopper")
        asyncio.get_running_loop().call_soon(agent.interrupt, "alice", "s1", "stop now")
        return "stopping"

    model = ScriptedModel(
        [
            ModelResponse(
                tool_calls=[
                    ToolCall("first", {}, id="a"),
                    ToolCall("stopper", {}, id="b"),
                    ToolCall("second", {}, id="c"),
                ]
            )
        ]
    )
    agent = Agent("A", "assistant", model, tools=[first, second, stopper], journal=j)
    reply = await agent.call("go", ctx())
    assert reply.metadata["interrupted"]
    assert ran == ["first", "stopper"]
    results = {
        e.call_id: e
        for _, e in await all_events(j, key())
        if isinstance(e, ToolCallCompleted)
    }
    assert not results["a"].is_error
    assert not results["b"].is_error
    assert results["c"].is_error
    assert "not run" in results["c"].output
    assert len(model.calls) == 1  # no model call after the interrupt

    # Interrupted after the last tool: the checkpoint before the model call stops it.
    agent.model = model = ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall("stopper", {}, id="d")]), "unreachable"]
    )
    reply = await agent.call("once more", ctx())
    assert reply.metadata["interrupted"]
    assert len(model.calls) == 1
    assert model.remaining == 1

    # An interrupt during a model call drops that call and stops the run.
    in_model = asyncio.Event()

    async def slow_model(messages, tools):
        in_model.set()
        await asyncio.sleep(30)
        return ModelResponse(text="too late")

    agent.model = slow_model
    task = asyncio.create_task(agent.call("think hard", ctx()))
    await asyncio.wait_for(in_model.wait(), 5)
    assert agent.interrupt("alice", "s1")
    reply = await asyncio.wait_for(task, 5)
    assert reply.metadata["interrupted"]
    events = await all_events(j, key())
    assert names(events)[-1] == "RunInterrupted"
    assert "too late" not in repr(events)


async def test_close_mid_run_interrupts_by_shutdown_and_commits_first():
    url = fresh_url()
    j = Journal.open(url)
    started = asyncio.Event()

    async def forever() -> str:
        """Never finishes on its own."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    agent = Agent(
        "A",
        "assistant",
        ScriptedModel([ModelResponse(tool_calls=[ToolCall("forever", {}, id="f")])]),
        tools=[forever],
        journal=j,
    )
    task = asyncio.create_task(agent.call("go", ctx()))
    await asyncio.wait_for(started.wait(), 5)
    await agent.close()
    # Committed before close() returned.
    events = await all_events(j, key())
    interrupted = [e for _, e in events if isinstance(e, RunInterrupted)]
    assert [(e.by, e.run_id) for e in interrupted] == [
        ("shutdown", next(e.run_id for _, e in events if isinstance(e, RunStarted)))
    ]
    result = next(e for _, e in events if isinstance(e, ToolCallCompleted))
    assert result.is_error
    assert "not verified" in result.output
    reply = await task
    assert reply.metadata == {"interrupted": True, "by": "shutdown"}
    with pytest.raises(RuntimeError, match="closed"):
        await agent.call("more", ctx())
    # The lease was released: a new instance takes over at once.
    other = Agent("A", "assistant", ScriptedModel(["back"]), journal=Journal.open(url))
    assert (await other.call("hi", ctx())).text == "back"


async def test_async_with_closes_and_cancelling_a_call_records_the_interrupt():
    j = Journal.open(fresh_url())
    in_model = asyncio.Event()

    async def slow_model(messages, tools):
        in_model.set()
        await asyncio.sleep(30)
        return ModelResponse(text="late")

    async with Agent("A", "assistant", slow_model, journal=j) as agent:
        task = asyncio.create_task(agent.call([Msg("user", "hi")], ctx()))
        await asyncio.wait_for(in_model.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        events = await all_events(j, key())
        assert names(events)[-1] == "RunInterrupted"
        assert events[-1][1].reason == "the call was cancelled"
    assert agent.closed


async def test_cancelling_a_call_mid_tool_resolves_its_calls():
    j = Journal.open(fresh_url())
    started = asyncio.Event()
    ran: list[str] = []

    async def hang() -> str:
        """Hangs."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    def after() -> str:
        """Must not run."""
        ran.append("after")
        return "ran"

    model = ScriptedModel(
        [
            ModelResponse(
                tool_calls=[ToolCall("hang", {}, id="h"), ToolCall("after", {}, id="a")]
            ),
            "next turn",
        ]
    )
    agent = Agent("A", "assistant", model, tools=[hang, after], journal=j)
    task = asyncio.create_task(agent.call("go", ctx()))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == []
    events = await all_events(j, key())
    results = {
        e.call_id: e.output for _, e in events if isinstance(e, ToolCallCompleted)
    }
    assert "not verified" in results["h"]
    assert "not run" in results["a"]
    assert names(events)[-1] == "RunInterrupted"
    state = await agent.get_agent_state(ctx())
    assert state.tool_context.pending_calls == {}
    assert (await agent.call("and now?", ctx())).text == "next turn"


class GatedLeaseMark(MemoryStore):
    """Holds the next idle (or busy) mark of a ``LEASE`` until the test opens it."""

    def __init__(self) -> None:
        super().__init__()
        self.armed: bool | None = None  # the mark to hold: idle (True) or busy
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def replace(self, key, data, *, if_match):
        idle = b'"idle":true' in data
        if self.armed is not None and key.endswith("/LEASE") and idle is self.armed:
            self.armed = None
            self.entered.set()
            await self.gate.wait()
        return await super().replace(key, data, if_match=if_match)


def renewals() -> list[asyncio.Task]:
    return [
        t
        for t in asyncio.all_tasks()
        if t.get_name().startswith("lease-renewal") and not t.done()
    ]


@pytest.mark.parametrize("mark", ["parking", "taking back"])
async def test_cancelling_an_operation_while_its_lease_is_marked_closes_the_writer(
    mark,
):
    store = GatedLeaseMark()
    j = Journal(store)
    agent = Agent("A", "assistant", ScriptedModel([]), journal=j)
    await agent.update_agent_state(ctx(), "warm", lambda s: None)  # thread exists
    if mark == "parking":
        await agent.close()  # the next operation acquires, then parks (idle mark)
        agent = Agent("A", "assistant", ScriptedModel([]), journal=j)
    store.armed = mark == "parking"  # else: the busy mark of a parked writer

    def summarise(state):
        state.summary = "x"

    task = asyncio.create_task(agent.update_agent_state(ctx(), "s", summarise))
    await store.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await agent.close()
    # The writer was closed, not leaked: nothing renews the lease any more, and
    # another instance takes the thread at once (no wait for the lease to lapse).
    assert renewals() == []
    other = Agent("B", "assistant", ScriptedModel([]), journal=j)
    await other.update_agent_state(ctx(), "other instance", lambda s: None)
    await other.close()
    assert renewals() == []
