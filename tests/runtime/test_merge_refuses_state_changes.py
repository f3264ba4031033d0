"""``APPEND_MERGE`` merges a turn's messages, and refuses a turn that did more.

Found by review: a snapshot-mode turn that raced another one kept only its new
messages; its todo list and plan mode, committed inside the run and reported to
the model as done ("todo list saved", "plan mode is on"), were dropped without a
word, so the saved state and its own context disagreed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from journal import (
    Agent,
    ModelResponse,
    RuntimeContext,
    ScriptedModel,
    ToolCall,
    builtin_tools,
)
from journal.errors import StaleStateError
from journal.policy import ConflictPolicy
from stores.state.memory import InMemoryAgentStateStore

CTX = RuntimeContext(user_id="alice", session_id="s1")


async def _race(first_calls: list[ToolCall]) -> tuple[Agent, Any]:
    store = InMemoryAgentStateStore()
    await Agent("A", "assistant", ScriptedModel(["base"]), state_store=store).call(
        "base", CTX
    )
    in_model, release = asyncio.Event(), asyncio.Event()
    step = {"n": 0}

    async def model(messages: Any, tools: Any) -> Any:
        step["n"] += 1
        if step["n"] == 1 and first_calls:
            return ModelResponse(tool_calls=first_calls)
        in_model.set()
        await release.wait()
        return "reply A"

    a = Agent(
        "A",
        "assistant",
        model,
        tools=builtin_tools(),
        state_store=store,
        conflict_policy=ConflictPolicy.APPEND_MERGE,
    )
    b = Agent("A", "assistant", ScriptedModel(["reply B"]), state_store=store)
    task = asyncio.create_task(a.call("from A", CTX))
    await asyncio.wait_for(in_model.wait(), 10)
    await b.call("from B", CTX)
    release.set()
    return b, task


async def test_a_turn_that_changed_the_state_is_not_merged():
    b, task = await _race(
        [
            ToolCall(
                "todo_write", {"todos": [{"content": "ship", "status": "pending"}]}
            ),
            ToolCall("enter_plan_mode", {"plan_file": "PLAN.md"}),
        ]
    )
    with pytest.raises(StaleStateError, match="beyond"):
        await task
    state = await b.get_agent_state(CTX)
    assert [m.text for m in state.context if m.role == "user"] == ["base", "from B"]


async def test_a_turn_that_only_added_messages_is_merged():
    b, task = await _race([])
    await task
    state = await b.get_agent_state(CTX)
    texts = [m.text for m in state.context]
    assert texts == ["base", "base", "from B", "reply B", "from A", "reply A"]
