"""The runtime at parity with the seed: each test here failed before it was built.

State changed by tools, sub-agents, the model's view of the state, leases kept
across calls, and the interrupt details.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from journal import (
    Agent,
    Journal,
    ModelResponse,
    Msg,
    RuntimeContext,
    ScriptedModel,
    ToolCall,
    codec,
)
from journal import events as ev
from journal.errors import RecursiveRunError
from projections import RunLedger, fold
from stores import InMemoryAgentStateStore

from ._support import all_events, all_records, fresh_url, key, names

if TYPE_CHECKING:
    from projections.agent_state import AgentState


def ctx(session: str = "s1", **kw) -> RuntimeContext:
    return RuntimeContext(user_id="alice", session_id=session, **kw)


def calls_then(*tool_names: str, reply: str = "done") -> ScriptedModel:
    script: list = [
        ModelResponse(tool_calls=[ToolCall(n, {}, id=f"c{i}")])
        for i, n in enumerate(tool_names)
    ]
    script.append(reply)
    return ScriptedModel(script)


def journal_agent(model, tools=(), **kw) -> tuple[Agent, Journal]:
    j = Journal.open(fresh_url())
    return Agent("A", "assistant", model, tools=tools, journal=j, **kw), j


# --- state changed by a tool ----------------------------------------------------------


async def enter_plan(ctx: RuntimeContext) -> str:
    """Enter plan mode through the call's context."""

    def change(state: AgentState) -> None:
        state.plan_mode_context.active = True
        state.plan_mode_context.plan_file = "plan.md"

    await ctx.update_state("plan", change)
    return "planning"


async def test_a_tool_changes_state_through_its_context_in_journal_mode() -> None:
    agent, j = journal_agent(calls_then("enter_plan"), [enter_plan])
    await agent.call("go", ctx())
    await agent.close()
    state = await j.load(key())
    assert state.plan_mode_context.active
    kinds = names(await all_events(j, key()))
    assert "PlanModeEntered" in kinds
    # Committed inside the run, before the tool's result.
    assert kinds.index("PlanModeEntered") < kinds.index("ToolCallCompleted")
    assert (await j.verify(key())).ok


async def test_a_tool_changes_state_identically_in_snapshot_mode() -> None:
    store = InMemoryAgentStateStore()
    agent = Agent(
        "A", "assistant", calls_then("enter_plan"), [enter_plan], state_store=store
    )
    await agent.call("go", ctx())
    state = await agent.get_agent_state("alice", "s1")
    assert state.plan_mode_context.active
    assert state.plan_mode_context.plan_file == "plan.md"


async def test_a_direct_change_of_ctx_agent_state_is_committed_not_dropped() -> None:
    def grant(ctx: RuntimeContext) -> str:
        """Mutate the call-scoped state directly."""
        assert ctx.agent_state is not None
        ctx.agent_state.permission_context.rules["shell"] = "allow"
        return "granted"

    agent, j = journal_agent(calls_then("grant"), [grant])
    await agent.call("go", ctx())
    await agent.close()
    assert (await j.load(key())).permission_context.rules == {"shell": "allow"}
    assert "PermissionRuleSet" in names(await all_events(j, key()))
    assert (await j.verify(key())).ok


async def test_update_agent_state_from_a_tool_on_its_own_thread_does_not_deadlock():
    holder: dict[str, Agent] = {}

    async def write_todos(ctx: RuntimeContext) -> str:
        """Write todos through the agent's public method."""

        def change(state: AgentState) -> None:
            state.tasks_context.todos = [{"content": "a", "status": "pending"}]
            state.tasks_context.revision += 1

        after = await holder["agent"].update_agent_state(ctx, "todos", change)
        return f"revision {after.tasks_context.revision}"

    agent, j = journal_agent(calls_then("write_todos"), [write_todos])
    holder["agent"] = agent
    reply = await asyncio.wait_for(agent.call("go", ctx()), timeout=10)
    assert reply.text == "done"
    await agent.close()
    assert (await j.load(key())).tasks_context.revision == 1


async def test_every_public_method_is_safe_inside_a_tool() -> None:
    holder: dict[str, Agent] = {}

    async def poke(ctx: RuntimeContext) -> str:
        """Call the agent's public methods from inside the run."""
        agent = holder["agent"]
        state = await agent.get_agent_state(ctx)
        pending = await agent.pending_tool_calls(ctx)
        await agent.clear_context(ctx, reason="tool cleared")
        return f"{len(state.context)} {len(pending)}"

    agent, j = journal_agent(calls_then("poke"), [poke])
    holder["agent"] = agent
    await asyncio.wait_for(agent.call("go", ctx()), timeout=10)
    await agent.close()
    kinds = names(await all_events(j, key()))
    assert "ContextCleared" in kinds
    assert (await j.verify(key())).ok


# --- sub-agents -----------------------------------------------------------------------


async def test_a_child_agent_has_its_own_run_linked_to_its_parent() -> None:
    j = Journal.open(fresh_url())
    child = Agent("C", "researcher", ScriptedModel(["found it"]), journal=j)

    async def delegate(ctx: RuntimeContext) -> str:
        """Ask the child agent."""
        return (await child.call("look it up", ctx)).text

    parent = Agent("P", "assistant", calls_then("delegate"), [delegate], journal=j)
    ticket = parent.prepare_call("research this", ctx(turn_id="turn-7"))
    await ticket.result()
    await parent.close()
    await child.close()
    child_key = key(agent="researcher")
    started = [
        e for _, e in await all_events(j, child_key) if isinstance(e, ev.RunStarted)
    ]
    assert len(started) == 1
    assert started[0].run_id != ticket.run_id
    assert started[0].parent_run_id == ticket.run_id
    assert started[0].parent_thread == str(key())
    assert started[0].turn_id == "turn-7"
    records = [r async for r in j.records(child_key, 1)]
    ledger = fold(RunLedger(), RunLedger().initial(child_key), records)
    entry = ledger[started[0].run_id]
    assert entry.parent_run_id == ticket.run_id
    assert entry.turn_id == "turn-7"


async def test_a_child_on_its_parents_own_thread_gets_a_clear_error() -> None:
    holder: dict[str, Agent] = {}

    async def recurse(ctx: RuntimeContext) -> str:
        """Call the same agent on the same thread."""
        try:
            await holder["agent"].call("again", ctx)
        except RecursiveRunError as exc:
            return f"refused: {exc}"
        return "ran"

    agent, j = journal_agent(calls_then("recurse"), [recurse], lease_wait=30)
    holder["agent"] = agent
    await asyncio.wait_for(agent.call("go", ctx()), timeout=10)
    await agent.close()
    done = [
        e for _, e in await all_events(j, key()) if isinstance(e, ev.ToolCallCompleted)
    ]
    assert done[0].output.startswith("refused:")
    assert str(key()) in done[0].output


# --- the model's view -----------------------------------------------------------------


async def test_the_system_prompt_is_shown_but_never_persisted() -> None:
    seen: list[list[Msg]] = []

    def answer(messages: list[Msg]) -> str:
        seen.append(messages)
        return "ok"

    agent, j = journal_agent(
        ScriptedModel([answer, answer]), system_prompt="You are terse."
    )
    await agent.call("hi", ctx())
    await agent.clear_context(ctx())
    await agent.call("again", ctx())
    await agent.close()
    for messages in seen:
        assert messages[0].role == "system"
        assert messages[0].text.startswith("You are terse.")
    state = await j.load(key())
    assert all(m.role != "system" for m in state.context)


async def test_tasks_and_plan_mode_are_shown_to_the_model_not_stored() -> None:
    seen: list[list[Msg]] = []

    def answer(messages: list[Msg]) -> str:
        seen.append(messages)
        return "ok"

    agent, j = journal_agent(ScriptedModel([answer]))

    def setup(state: AgentState) -> None:
        state.plan_mode_context.active = True
        state.tasks_context.todos = [
            {"content": "write the tests", "status": "pending"}
        ]
        state.tasks_context.revision = 1

    await agent.update_agent_state(ctx(), "setup", setup)
    await agent.call("hi", ctx())
    await agent.close()
    shown = "\n".join(m.text for m in seen[0] if m.role == "system")
    assert "plan mode" in shown.lower()
    assert "write the tests" in shown
    assert all(m.role != "system" for m in (await j.load(key())).context)


async def test_permission_rules_and_tool_groups_decide_what_the_model_is_offered():
    offered: list[list[str]] = []

    class Recorder:
        async def __call__(self, messages, tools) -> ModelResponse:
            offered.append(sorted(t.name for t in tools))
            return ModelResponse("ok")

    def read() -> str:
        """Read."""
        return "r"

    def delete() -> str:
        """Delete."""
        return "d"

    from journal import tool

    admin = tool(delete, group="admin")
    j = Journal.open(fresh_url())
    agent = Agent(
        "A",
        "assistant",
        Recorder(),
        tools=[read, admin],
        journal=j,
    )
    await agent.call("1", ctx())

    def activate(state: AgentState) -> None:
        state.tool_context.active_groups.append("admin")

    await agent.update_agent_state(ctx(), "admin on", activate)
    await agent.call("2", ctx())

    def deny(state: AgentState) -> None:
        state.permission_context.rules["read"] = "deny"

    await agent.update_agent_state(ctx(), "deny read", deny)
    await agent.call("3", ctx())
    await agent.close()
    assert offered == [["read"], ["delete", "read"], ["delete"]]


async def test_an_ask_rule_calls_the_applications_hook() -> None:
    asked: list[str] = []

    async def approve(call: ToolCall, ctx: RuntimeContext) -> bool:
        asked.append(call.name)
        return call.name == "safe"

    def safe() -> str:
        """Safe."""
        return "safe ran"

    def risky() -> str:
        """Risky."""
        return "risky ran"

    agent, j = journal_agent(
        calls_then("safe", "risky"), [safe, risky], ask_permission=approve
    )

    def ask_both(state: AgentState) -> None:
        state.permission_context.rules.update(safe="ask", risky="ask")

    await agent.update_agent_state(ctx(), "ask", ask_both)
    await agent.call("go", ctx())
    await agent.close()
    assert asked == ["safe", "risky"]
    done = {
        e.call_id: e
        for _, e in await all_events(j, key())
        if isinstance(e, ev.ToolCallCompleted)
    }
    assert done["c0"].output == "safe ran"
    assert done["c1"].is_error
    assert "not approved" in done["c1"].output


# --- lease economy --------------------------------------------------------------------


async def test_five_calls_on_one_session_add_one_fence() -> None:
    agent, j = journal_agent(ScriptedModel(["a", "b", "c", "d", "e"]))
    for text in "12345":
        await agent.call(text, ctx())
    await agent.close()
    kinds = names(await all_events(j, key()))
    assert kinds.count("LeaseAcquired") == 1
    records = await all_records(j, key())
    # The fence travels in the first record of the first call.
    assert [type(e).__name__ for e in records[0].events][:3] == [
        "ThreadCreated",
        "LeaseAcquired",
        "RunStarted",
    ]
    assert len(records) == 10


async def test_an_operation_with_nothing_to_commit_commits_nothing() -> None:
    agent, j = journal_agent(ScriptedModel(["a"]))
    await agent.call("hi", ctx())
    head = await j.head(key())
    await agent.update_agent_state(ctx(), "no-op", lambda s: None)
    state = await agent.get_agent_state(ctx())
    await agent.save_agent_state(ctx(), state)
    await agent.close()
    # A fresh instance: its no-op does not even write a fence.
    other = Agent("A", "assistant", ScriptedModel([]), journal=j)
    await other.update_agent_state(ctx(), "no-op", lambda s: None)
    await other.close()
    assert await j.head(key()) == head


async def test_a_second_instance_takes_an_idle_warm_lease_at_once() -> None:
    j = Journal.open(fresh_url())
    first = Agent("A", "assistant", ScriptedModel(["one", "three"]), journal=j)
    second = Agent("A", "assistant", ScriptedModel(["two"]), journal=j)
    await first.call("1", ctx())
    await second.call("2", ctx())  # no LeaseHeldError: first is idle
    await first.call("3", ctx())  # first's warm lease was taken: it starts over
    await first.close()
    await second.close()
    state = await j.load(key())
    assert [m.text for m in state.context if m.role == "assistant"] == [
        "one",
        "two",
        "three",
    ]
    assert (await j.verify(key())).ok


async def test_a_refused_run_commits_nothing() -> None:
    j = Journal.open(fresh_url())
    async with j.writer(key(), "old") as w:
        await w.append(
            [ev.RunStarted("r1"), ev.ToolCallRequested("c1", "pay", {}, run_id="r1")],
            run_id="r1",
        )
        await w.append([ev.RunInterrupted("r1", "crash", by="recovery")], run_id="r1")
    head = await j.head(key())
    agent = Agent("A", "assistant", ScriptedModel(["x"]), journal=j)
    from journal.errors import UncertainToolCallsError

    with pytest.raises(UncertainToolCallsError):
        await agent.call("hi", ctx())
    await agent.close()
    assert await j.head(key()) == head


# --- interrupts and smaller parts -----------------------------------------------------


async def slow(ctx: RuntimeContext) -> str:
    """Wait to be interrupted."""
    await asyncio.sleep(30)
    return "never"


async def _interrupt_while_running(agent: Agent, context: RuntimeContext, **kw):
    run = agent.prepare_call("go", context)
    stream = run.stream()
    async for item in stream:
        if isinstance(item, ToolCall):
            break
    assert agent.interrupt("alice", "s1", **kw)
    return await run.result()


async def test_a_user_interrupt_is_not_a_shutdown_marker() -> None:
    agent, j = journal_agent(calls_then("slow"), [slow])
    reply = await _interrupt_while_running(agent, ctx())
    assert reply.metadata["interrupted"]
    await agent.close()
    assert not (await j.load(key())).shutdown_interrupted


async def test_an_interrupt_message_becomes_a_user_turn() -> None:
    agent, j = journal_agent(calls_then("slow"), [slow])
    steer = Msg("user", "stop, use the other file")
    await _interrupt_while_running(agent, ctx(), message=steer)
    await agent.close()
    context = (await j.load(key())).context
    assert context[-1].role == "user"
    assert context[-1].text == "stop, use the other file"
    interrupted = [
        e for _, e in await all_events(j, key()) if isinstance(e, ev.RunInterrupted)
    ]
    assert interrupted[0].reason == "stop, use the other file"


class SlowCaller:
    """Calls the slow tool once per run, then replies."""

    async def __call__(self, messages, tools) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse("after")
        return ModelResponse(tool_calls=[ToolCall("slow", {})])


async def test_an_interrupt_can_choose_one_thread_of_a_session() -> None:
    agent, _ = journal_agent(SlowCaller(), [slow])
    other = ctx(thread_id="side")
    side = agent.prepare_call("go", other)
    main = agent.prepare_call("go", ctx())
    side_task = asyncio.ensure_future(side.result())
    async for item in main.stream():
        if isinstance(item, ToolCall):
            break
    assert agent.interrupt("alice", "s1", thread_id="main")
    await main.result()
    assert not side_task.done()
    side.interrupt()
    await side_task
    await agent.close()


async def test_thread_key_and_prepare_run_are_public() -> None:
    agent, _ = journal_agent(ScriptedModel(["x"]))
    assert agent.thread_key(ctx()) == key()
    run = agent.prepare_run("hi", ctx())
    assert (await run.result()).text == "x"
    await agent.close()


async def test_a_tool_output_is_stored_once() -> None:
    marker = "MARKER-" + "x" * 40

    def echo() -> str:
        """Echo the marker."""
        return marker

    agent, j = journal_agent(calls_then("echo"), [echo])
    await agent.call("go", ctx())
    await agent.close()
    stored = b"".join(
        codec.encode_record(
            version=r.version,
            epoch=r.epoch,
            writer=r.writer,
            batch_id=r.batch_id,
            run_id=r.run_id,
            committed_at=r.committed_at,
            prev_hash=bytes.fromhex(r.prev_hash),
            events=r.events,
        ).data
        for r in await all_records(j, key())
    )
    assert stored.count(marker.encode()) == 1
    # The model still sees the result as a tool message.
    state = await j.load(key())
    tool_msgs = [m for m in state.context if m.role == "tool"]
    assert tool_msgs[0].content[0].output == marker


async def test_an_idle_kept_lease_reads_as_idle_not_held() -> None:
    from journal.cli.commands.leases import read_lease_view

    agent, j = journal_agent(ScriptedModel(["a"]))
    await agent.call("hi", ctx())
    lease = await read_lease_view(j, key())
    assert lease is not None
    assert lease.idle
    assert not lease.live  # no operation runs: the CLI may recover or reconcile
    await agent.close()
    # Closing an idle writer writes nothing more: the idle lease is free already.
    after = await read_lease_view(j, key())
    assert after == lease
