"""The task context through the Agent and a tool's ``ctx.tasks``, in both modes."""

from __future__ import annotations

import pytest

from journal import (
    Agent,
    Journal,
    ModelResponse,
    Msg,
    RuntimeContext,
    ScriptedModel,
    TaskView,
    ToolCall,
    VerificationResult,
    builtin_tools,
)
from journal import events as ev
from journal.errors import TaskError, TodoRevisionError
from stores import InMemoryAgentStateStore

from ._support import all_events, fresh_url, key, names


def ctx() -> RuntimeContext:
    return RuntimeContext(user_id="alice", session_id="s1")


def agents(model, tools=()):
    j = Journal.open(fresh_url())
    yield "journal", Agent("A", "assistant", model(), tools=tools, journal=j), j
    store = InMemoryAgentStateStore()
    yield (
        "snapshot",
        Agent("A", "assistant", model(), tools=tools, state_store=store),
        None,
    )


async def propose_tests(ctx: RuntimeContext) -> str:
    """Propose a requirement and bind evidence for another one."""
    await ctx.tasks.propose_requirement("tests pass", note="the suite is red")
    await ctx.tasks.set_object_version("src/app.py", "v1")
    await ctx.tasks.bind_evidence(
        "ships", "diff reviewed", object_id="src/app.py", object_version="v1"
    )
    return "proposed"


def one_tool(name: str):
    return lambda: ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall(name, {}, id="t1")]), "done"]
    )


async def test_the_task_context_is_the_same_in_both_modes() -> None:
    seen: dict[str, object] = {}
    for mode, agent, j in agents(one_tool("propose_tests"), [propose_tests]):
        await agent.begin_task(ctx(), "ship the release", ["ships"], task_id="T-1")
        await agent.call("go", ctx())
        state = await agent.get_agent_state(ctx())
        view = agent.task_view(state)
        statuses = {r.text: r.status for r in view.requirements}
        # A tool may only propose: the proposal waits for a trusted decision.
        assert statuses == {"ships": "confirmed", "tests pass": "proposed"}
        await agent.decide_requirement(ctx(), "tests pass", "confirmed", by="lead")
        # The object changes: the evidence bound to v1 goes stale.
        await agent.set_object_version(ctx(), "src/app.py", "v2")
        view = agent.task_view(await agent.get_agent_state(ctx()))
        (evidence,) = [e for e in view.evidence if e.evidence == "diff reviewed"]
        assert evidence.stale
        seen[mode] = (
            [(r.text, r.status) for r in view.requirements],
            [(e.requirement, e.evidence, e.object_id, e.stale) for e in view.evidence],
            view.object_versions,
        )
        await agent.close()
        if j is not None:
            kinds = names(await all_events(j, key()))
            for kind in (
                "TaskBegun",
                "RequirementProposed",
                "ObjectVersionSet",
                "EvidenceBound",
                "RequirementDecided",
            ):
                assert kind in kinds, kind
            assert "AgentStateReplaced" not in kinds
            assert (await j.verify(key())).ok
    assert seen["journal"] == seen["snapshot"]


async def test_a_tool_cannot_decide_and_nothing_is_inferred() -> None:
    async def done_all(ctx: RuntimeContext) -> str:
        """Complete every todo."""
        await ctx.tasks.write_todos([{"content": "build", "status": "completed"}])
        assert not hasattr(ctx.tasks, "decide_requirement")
        return "all done"

    for _, agent, _j in agents(one_tool("done_all"), [done_all]):
        await agent.begin_task(ctx(), "release", ["built"])
        await agent.call("go", ctx())
        view = agent.task_view(await agent.get_agent_state(ctx()))
        # All todos completed confirms and verifies nothing.
        assert view.todos[0]["status"] == "completed"
        assert view.last_verification is None
        await agent.close()


async def test_a_decision_on_an_unknown_requirement_is_refused() -> None:
    for _, agent, _j in agents(lambda: ScriptedModel([])):
        await agent.begin_task(ctx(), "release", ["built"])
        with pytest.raises(TaskError, match="nope"):
            await agent.decide_requirement(ctx(), "nope", "confirmed")
        await agent.close()


async def test_a_stale_todo_revision_is_refused() -> None:
    for _, agent, _j in agents(lambda: ScriptedModel([])):
        await agent.write_todos(ctx(), [{"content": "a", "status": "pending"}])
        await agent.write_todos(
            ctx(), [{"content": "a", "status": "completed"}], expected_revision=1
        )
        with pytest.raises(TodoRevisionError):
            await agent.write_todos(
                ctx(), [{"content": "a", "status": "pending"}], expected_revision=1
            )
        state = await agent.get_agent_state(ctx())
        assert state.tasks_context.revision == 2
        await agent.close()


async def test_a_verification_comes_only_from_the_applications_service() -> None:
    looked: list[TaskView] = []

    async def verifier(task: TaskView) -> VerificationResult:
        looked.append(task)
        return VerificationResult(passed=True, detail="suite green", verifier="ci")

    for _, agent, j in agents(lambda: ScriptedModel([])):
        await agent.begin_task(ctx(), "release", ["built"])
        await agent.bind_evidence(ctx(), "built", "ci run 7", "build", 7)
        state = await agent.verify_task(ctx(), verifier)
        assert looked[-1].goal == "release"
        (verification,) = state.tasks_context.verifications
        assert verification.passed
        assert verification.verifier == "ci"
        assert verification.evidence_versions == {"build": 7}
        await agent.close()
        if j is not None:
            assert "VerificationRecorded" in names(await all_events(j, key()))


async def test_builtin_tools_write_todos_and_plan_mode_inside_the_run() -> None:
    script = ScriptedModel(
        [
            ModelResponse(
                tool_calls=[
                    ToolCall(
                        "todo_write",
                        {"todos": [{"content": "plan", "status": "in_progress"}]},
                        id="a",
                    ),
                    ToolCall("enter_plan_mode", {"plan_file": "p.md"}, id="b"),
                ]
            ),
            ModelResponse(
                tool_calls=[
                    ToolCall(
                        "todo_write",
                        {
                            "todos": [{"content": "plan", "status": "completed"}],
                            "revision": 0,
                        },
                        id="c",
                    )
                ]
            ),
            "planned",
        ]
    )
    j = Journal.open(fresh_url())
    agent = Agent("A", "assistant", script, tools=builtin_tools(), journal=j)
    await agent.call("plan it", ctx())
    await agent.close()
    state = await j.load(key())
    assert state.plan_mode_context.active
    assert state.tasks_context.revision == 1  # the stale second write was refused
    done = {
        e.call_id: e
        for _, e in await all_events(j, key())
        if isinstance(e, ev.ToolCallCompleted)
    }
    assert not done["a"].is_error
    assert done["c"].is_error
    assert "revision" in done["c"].output
    # In plan mode the model was offered the read-only built-ins only, and saw the
    # plan-mode note and its todo list in a generated system message.
    last = script.calls[-1]
    shown = "\n".join(m.text for m in last if m.role == "system")
    assert "Plan mode is on" in shown
    assert "plan" in shown
    assert all(isinstance(m, Msg) for m in last)
