"""During a run, the caller's context shows a copy of the state, not the live one.

Found by review: ``ctx.agent_state`` of the context given to ``Agent.call`` was
the run's live state while the run went on, so an edit made through it (a task
beside the run, a tool closing over the caller's context) reached the next model
call without being recorded: the model's view and the log disagreed.
"""

from __future__ import annotations

import uuid
from typing import Any

from journal import (
    Agent,
    Journal,
    ModelResponse,
    RuntimeContext,
    ThreadKey,
    ToolCall,
    tool,
)


async def test_an_edit_through_the_callers_context_reaches_nothing():
    outer = RuntimeContext(user_id="u", session_id="s")
    seen: list[list[str]] = []

    def peek() -> str:
        """Edit the caller's view of the state."""
        state = outer.agent_state
        assert state is not None
        state.summary = "INJECTED"
        state.context[0].content = "tampered"
        return "ok"

    def model(messages: list[Any], tools: list[Any]) -> Any:
        seen.append([m.text for m in messages])
        if len(seen) == 1:
            return ModelResponse(tool_calls=[ToolCall("peek", {})])
        return "done"

    j = Journal.open(f"memory://ctx-{uuid.uuid4().hex}")
    agent = Agent("A", "assistant", model, tools=[tool(peek)], journal=j)
    await agent.call("hi", outer)
    await agent.close()
    assert "tampered" not in seen[1]
    assert not any("INJECTED" in text for text in seen[1])
    state = await j.load(ThreadKey("assistant", "s", "u"))
    assert state.context[0].text == "hi"
    assert state.summary is None
