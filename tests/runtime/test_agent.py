"""Journal-mode Agent: the ReAct loop, its records, sessions, run ids and state."""

from __future__ import annotations

import pytest

from journal import (
    Agent,
    ContextCleared,
    DuplicateRunError,
    Journal,
    MessageAppended,
    ModelResponse,
    Msg,
    PermissionRuleSet,
    PlanModeEntered,
    Record,
    RunCompleted,
    RunStarted,
    RuntimeContext,
    ScriptedModel,
    StaleStateError,
    TodosWritten,
    ToolCall,
    ToolCallCompleted,
    ToolCallRequested,
    ToolGroupActivated,
    ToolResultBlock,
    ToolUseBlock,
)
from projections import HistoryProjection, fold

from ._support import all_events, all_records, fresh_url, key, names


def ctx(session: str = "s1", **kw) -> RuntimeContext:
    return RuntimeContext(user_id="alice", session_id=session, **kw)


async def test_a_fresh_agent_per_request_continues_the_session(tmp_path):
    """Shared config, new Agent + context per request: the journal carries state."""
    for url in (fresh_url(), str(tmp_path / "journal")):
        replies = ["nice to meet you, Ada", "you are Ada"]
        seen: list[list[Msg]] = []
        for turn, text in enumerate(["my name is Ada", "who am I?"]):
            j = Journal.open(url)  # a new process would do the same

            def answer(
                messages: list[Msg], reply: str = replies[turn], seen: list = seen
            ) -> str:
                seen.append(messages)
                return reply

            agent = Agent("A", "assistant", ScriptedModel([answer]), journal=j)
            reply = await agent.call([Msg("user", text)], ctx())
            assert reply.text == replies[turn]
            await agent.close()
            await j.aclose()
        # The second request's model saw the first request's turn.
        assert [m.text for m in seen[1]] == [
            "my name is Ada",
            "nice to meet you, Ada",
            "who am I?",
        ]


async def test_react_loop_records_frame_and_write_ahead_order():
    j = Journal.open(fresh_url())
    k = key()
    observed: dict[str, object] = {}

    async def deploy(service: str) -> str:
        """Deploy a service (the side effect)."""
        # What the log holds at the moment of the side effect.
        head = await j.head(k)
        events = await all_events(j, k)
        requested = [v for v, e in events if isinstance(e, ToolCallRequested)]
        observed["head"] = head
        observed["requested_at"] = requested
        observed["completed"] = [
            e for _, e in events if isinstance(e, ToolCallCompleted)
        ]
        return f"{service} deployed"

    model = ScriptedModel(
        [
            ModelResponse(
                "deploying", [ToolCall("deploy", {"service": "api"}, id="c1")]
            ),
            "api is live",
        ]
    )
    agent = Agent("A", "assistant", model, tools=[deploy], journal=j)
    reply = await agent.call("deploy api", ctx())
    assert reply.role == "assistant"
    assert reply.text == "api is live"

    records = await all_records(j, k)
    events = [(r.version, e) for r in records for e in r.events]
    by_type = {type(e).__name__: v for v, e in events}
    # Input and RunStarted share the first record of the run, before the model.
    first = next(r for r in records if any(isinstance(e, RunStarted) for e in r.events))
    run_id = next(e.run_id for e in first.events if isinstance(e, RunStarted))
    assert first.run_id == run_id
    # A new thread's first record carries the fence too (it travels with the input).
    assert [type(e).__name__ for e in first.events] == [
        "ThreadCreated",
        "LeaseAcquired",
        "RunStarted",
        "MessageAppended",
    ]
    assert first.events[3].message.text == "deploy api"
    assert model.calls[0][-1].text == "deploy api"
    # Write-ahead: requested < side effect observed < completed.
    assert observed["requested_at"] == [by_type["ToolCallRequested"]]
    assert observed["completed"] == []
    assert (
        by_type["ToolCallRequested"] <= observed["head"] < by_type["ToolCallCompleted"]
    )
    # The assistant message with the call carries a ToolUseBlock; the result is a
    # tool message with a ToolResultBlock for the same call id.
    messages = [e.message for _, e in events if isinstance(e, MessageAppended)]
    assert isinstance(messages[1].content[1], ToolUseBlock)
    assert messages[1].content[1].id == "c1"
    # The result is stored once, in ToolCallCompleted, which is also the message.
    completed = next(e for _, e in events if isinstance(e, ToolCallCompleted))
    result = completed.message().content[0]
    assert isinstance(result, ToolResultBlock)
    assert (result.tool_use_id, result.output, result.is_error) == (
        "c1",
        "api deployed",
        False,
    )
    assert names(events)[-2:] == ["MessageAppended", "RunCompleted"]
    assert all(r.run_id == run_id for r in records if r.version >= first.version)
    # The model saw the tool result as a ToolResultBlock(tool_use_id=call_id).
    assert model.calls[1][-1].content[0].tool_use_id == "c1"
    state = await agent.get_agent_state("alice", "s1")
    assert state.active_run_id is None
    assert state.tool_context.pending_calls == {}


async def test_stream_events_yields_output_calls_results_records_and_reply():
    j = Journal.open(fresh_url())

    def echo(text: str) -> str:
        """Echo."""
        return text

    model = ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall("echo", {"text": "x"}, id="c1")]), "done"]
    )
    agent = Agent("A", "assistant", model, tools=[echo], journal=j)
    items = [item async for item in agent.stream_events("go", ctx())]
    kinds = [type(i).__name__ for i in items]
    assert kinds == [
        "Record",  # RunStarted + input
        "ModelResponse",
        "Record",  # assistant message + ToolCallRequested
        "ToolCall",
        "ToolResultBlock",
        "Record",  # ToolCallCompleted + tool result message
        "ModelResponse",
        "Record",  # reply + RunCompleted
        "Msg",
    ]
    records = [i for i in items if isinstance(i, Record)]
    assert records == (await all_records(j, key()))[-4:]
    assert items[-1].text == "done"


async def test_prepare_call_sets_run_id_before_anything_runs():
    j = Journal.open(fresh_url())
    model = ScriptedModel(["hi there"])
    agent = Agent("A", "assistant", model, journal=j)
    run = agent.prepare_call("hello", ctx())
    assert isinstance(run.run_id, str)
    assert run.run_id
    assert not run.started
    assert await j.head(key()) == 0
    assert model.calls == []
    reply = await run.result()
    assert reply.text == "hi there"
    assert await run.result() is reply  # awaiting again returns the same reply
    streamed = [i async for i in run.stream()]  # a late stream replays everything
    assert streamed[-1] is reply
    started = [e for _, e in await all_events(j, key()) if isinstance(e, RunStarted)]
    assert [e.run_id for e in started] == [run.run_id]

    explicit = agent.prepare_call("again", ctx(run_id="my-run-7", turn_id="t-2"))
    assert explicit.run_id == "my-run-7"
    agent.model = ScriptedModel(["ok"])
    await explicit.result()
    records = await all_records(j, key())
    rec = next(
        r
        for r in records
        if any(isinstance(e, RunStarted) for e in r.events) and r.run_id == "my-run-7"
    )
    assert rec.events[0].turn_id == "t-2"


async def test_run_ids_are_unique_and_reused_explicit_ids_are_rejected():
    url = fresh_url()
    j = Journal.open(url)
    agent = Agent("A", "assistant", ScriptedModel(["a", "b", "c"]), journal=j)
    same = ctx()
    await agent.call("1", same)
    await agent.call("2", same)
    started = [
        e.run_id for _, e in await all_events(j, key()) if isinstance(e, RunStarted)
    ]
    assert len(started) == 2
    assert len(set(started)) == 2

    await agent.call("3", ctx(run_id="order-42"))
    head = await j.head(key())
    counting = ScriptedModel(["never"])
    for instance in (
        agent,
        Agent("A", "assistant", counting, journal=Journal.open(url)),
    ):
        instance.model = counting
        with pytest.raises(DuplicateRunError, match="order-42"):
            await instance.call("4", ctx(run_id="order-42"))
    assert counting.calls == []
    # The refused runs committed nothing, not even a fence.
    assert await all_events(j, key(), head + 1) == []
    with pytest.raises(ValueError, match="blank"):
        agent.prepare_call(
            "x", RuntimeContext.model_construct(session_id="s1", run_id=" ")
        )


async def test_model_error_records_run_failed_and_reraises():
    j = Journal.open(fresh_url())

    async def broken(messages, tools):
        raise ConnectionError("model endpoint down")

    agent = Agent("A", "assistant", broken, journal=j)
    with pytest.raises(ConnectionError):
        await agent.call("hi", ctx())
    events = await all_events(j, key())
    assert names(events)[-1] == "RunFailed"
    assert "model endpoint down" in events[-1][1].error


async def test_max_iterations_bounds_the_loop():
    j = Journal.open(fresh_url())

    def again() -> str:
        """Loop."""
        return "more"

    model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("again", {})])] * 3)
    agent = Agent("A", "assistant", model, tools=[again], journal=j, max_iterations=3)
    with pytest.raises(RuntimeError, match="max_iterations=3"):
        await agent.call("go", ctx())
    assert len(model.calls) == 3
    events = await all_events(j, key())
    assert names(events)[-1] == "RunFailed"
    assert names(events).count("RunFailed") == 1
    assert names(events).count("ToolCallCompleted") == 3


async def test_stale_save_is_rejected_and_a_current_one_commits():
    j = Journal.open(fresh_url())
    agent = Agent("A", "assistant", ScriptedModel(["one", "two"]), journal=j)
    await agent.call("first", ctx())
    state = await agent.get_agent_state("alice", "s1")
    await agent.call("second", ctx())
    state.permission_context.rules["bash"] = "deny"
    with pytest.raises(StaleStateError):
        await agent.save_agent_state(ctx(), state)
    fresh = await agent.get_agent_state(ctx())
    fresh.permission_context.rules["bash"] = "deny"
    saved = await agent.save_agent_state(ctx(), fresh)
    assert saved.permission_context.rules == {"bash": "deny"}
    assert (await agent.get_agent_state(ctx())).permission_context.rules == {
        "bash": "deny"
    }
    events = await all_events(j, key())
    assert isinstance(events[-1][1], PermissionRuleSet)


async def test_update_agent_state_and_denied_tools():
    j = Journal.open(fresh_url())
    ran: list[str] = []

    def rm(path: str) -> str:
        """Remove a file."""
        ran.append(path)
        return "removed"

    def deny(state):
        state.permission_context.rules["rm"] = "deny"

    agent = Agent(
        "A",
        "assistant",
        ScriptedModel(
            [ModelResponse(tool_calls=[ToolCall("rm", {"path": "/"})]), "ok"]
        ),
        tools=[rm],
        journal=j,
    )
    state = await agent.update_agent_state(ctx(), "lock down", deny)
    assert state.permission_context.rules == {"rm": "deny"}
    await agent.call("clean up", ctx())
    assert ran == []
    results = [
        e for _, e in await all_events(j, key()) if isinstance(e, ToolCallCompleted)
    ]
    assert results[0].is_error
    assert "permission" in results[0].output


async def test_clear_context_keeps_the_rest_and_the_history():
    j = Journal.open(fresh_url())
    k = key()
    async with j.writer(k) as w:
        await w.append(
            [
                PermissionRuleSet("bash", "ask"),
                TodosWritten([{"task": "ship"}], 1),
                PlanModeEntered("plan.md"),
                ToolGroupActivated("web"),
            ]
        )
    agent = Agent("A", "assistant", ScriptedModel(["hello", "fresh start"]), journal=j)
    await agent.call("hi", ctx())
    cleared = await agent.clear_context(ctx())
    assert cleared.context == []
    assert cleared.summary is None
    again = await agent.clear_context("alice", "s1", reason="user asked")
    assert again.context == []
    state = await agent.get_agent_state("alice", "s1")
    assert state.context == []
    assert state.permission_context.rules == {"bash": "ask"}
    assert state.tasks_context.todos == [{"task": "ship"}]
    assert state.plan_mode_context.active
    assert state.plan_mode_context.plan_file == "plan.md"
    assert state.tool_context.active_groups == ["web"]
    records = await all_records(j, k)
    assert [
        e.reason for r in records for e in r.events if isinstance(e, ContextCleared)
    ] == ["cleared"]  # clearing an empty context again commits nothing
    history = fold(HistoryProjection(), [], records)
    assert [h.message.text for h in history] == ["hi", "hello"]
    assert all(h.cleared_at is not None for h in history)
    # The model of the next call sees only the new turn.
    reply = await agent.call("new topic", ctx())
    assert reply.text == "fresh start"
    seen = agent.model.calls[-1]
    assert [m.text for m in seen if m.role != "system"] == ["new topic"]
    # The state view (plan mode, todos) is generated for the call, not stored.
    assert "Plan mode is on" in seen[0].text


async def test_run_completed_is_the_last_event_and_state_is_injected():
    j = Journal.open(fresh_url())
    agent = Agent("A", "assistant", ScriptedModel(["hey"]), journal=j)
    c = ctx()
    await agent.call("hi", c)
    assert c.agent_state is not None
    assert [m.text for m in c.agent_state.context] == ["hi", "hey"]
    assert c.agent_state.version == await j.head(key())
    events = await all_events(j, key())
    assert isinstance(events[-1][1], RunCompleted)


async def test_agent_configuration_errors():
    j = Journal.open(fresh_url())
    model = ScriptedModel([])
    with pytest.raises(ValueError, match="exactly one"):
        Agent("A", "assistant", model)
    with pytest.raises(ValueError, match="max_iterations"):
        Agent("A", "assistant", model, journal=j, max_iterations=0)
    agent = Agent("A", "assistant", model, journal=j)
    with pytest.raises(ValueError, match="session"):
        agent.prepare_call("x", RuntimeContext(user_id="u"))
    default = Agent(
        "A", "assistant", ScriptedModel(["ok"]), journal=j, default_session_id="d"
    )
    await default.call("x", RuntimeContext(user_id="u"))
    assert await j.head(key("d", "u")) > 0
