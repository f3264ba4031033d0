"""What a tool gives back, however hostile, becomes a result the model sees.

Found by review: a tool's output that could not be converted (undecodable bytes,
deep nesting, a cycle) or not stored (NaN, an int beyond 64 bits, a lone
surrogate), an exception whose message could not be stored or printed, and a
synchronous ``ask_permission`` hook that raised, each crashed the run. The call
had no result, so it was left of unknown outcome and every later call on the
thread was refused until an operator reconciled it.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from journal import (
    Agent,
    Journal,
    ModelResponse,
    RuntimeContext,
    ScriptedModel,
    ToolCall,
    tool,
)

CTX = RuntimeContext(user_id="u", session_id="s")


def _deep(levels: int) -> list[Any]:
    root: list[Any] = []
    here = root
    for _ in range(levels):
        inner: list[Any] = []
        here.append(inner)
        here = inner
    return root


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


OUTPUTS: dict[str, Any] = {
    "undecodable bytes": b"\xff\xfe",
    "NaN": float("nan"),
    "an int beyond 64 bits": 2**70,
    "a lone surrogate": "a\ud800b",
    "deep nesting": _deep(2000),
    "a cycle": _circular(),
}
ERRORS: dict[str, Exception] = {
    "a message with a lone surrogate": OSError("no such file: b\udcffad"),
    "a message that cannot be printed": Unprintable(),
}


async def _two_calls(tools: list[Any], **agent: Any) -> list[Any]:
    j = Journal.open(f"memory://hostile-{uuid.uuid4().hex}")
    model = ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall("hostile", {})]), "done", "again"]
    )
    a = Agent("A", "assistant", model, tools=tools, journal=j, **agent)
    try:
        if agent:
            await a.update_agent_state(
                CTX,
                "ask first",
                lambda s: s.permission_context.rules.__setitem__("hostile", "ask"),
            )
        assert (await a.call("hi", CTX)).text == "done"
        assert (await a.call("next", CTX)).text == "again"
        state = await a.get_agent_state(CTX)
        return [m.content[0] for m in state.context if m.role == "tool"]
    finally:
        await a.close()


@pytest.mark.parametrize("what", sorted(OUTPUTS))
async def test_an_output_that_cannot_be_recorded_is_an_error_result(what: str):
    def hostile() -> object:
        """Return something hostile."""
        return OUTPUTS[what]

    [result] = await _two_calls([tool(hostile, name="hostile")])
    assert result.is_error
    assert "could not be recorded" in result.output


@pytest.mark.parametrize(
    "output", ["naïve café ☕", "emoji 😀 and 汉字", {"nested": ["ünïcödé", 1]}]
)
async def test_a_non_ascii_output_is_recorded_as_it_is(output: object):
    def friendly() -> object:
        """Return text beyond ASCII."""
        return output

    [result] = await _two_calls([tool(friendly, name="hostile")])
    assert not result.is_error
    assert result.output == output


@pytest.mark.parametrize("what", sorted(ERRORS))
async def test_a_tool_error_that_cannot_be_recorded_is_still_an_error_result(
    what: str,
):
    def hostile() -> object:
        """Raise something hostile."""
        raise ERRORS[what]

    [result] = await _two_calls([tool(hostile, name="hostile")])
    assert result.is_error
    assert type(ERRORS[what]).__name__ in result.output


@pytest.mark.parametrize("sync", [True, False])
async def test_an_approval_hook_that_raises_refuses_the_call(sync: bool):
    ran: list[int] = []

    def hostile() -> str:
        """Deploy."""
        ran.append(1)
        return "deployed"

    def sync_hook(call: ToolCall, ctx: RuntimeContext) -> bool:
        raise RuntimeError("approval service down")

    async def async_hook(call: ToolCall, ctx: RuntimeContext) -> bool:
        raise RuntimeError("approval service down")

    [result] = await _two_calls(
        [tool(hostile, name="hostile")],
        ask_permission=sync_hook if sync else async_hook,
    )
    assert result.is_error
    assert "asking for approval failed" in result.output
    assert not ran
