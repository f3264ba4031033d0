"""The OpenAI and Anthropic model clients against a loopback server.

An aiohttp server on 127.0.0.1 replays responses recorded in each API's wire format
(``fixtures/``: JSON bodies and server-sent event streams) and records what the
official SDKs sent, so no request leaves the machine. Covers text, tool calls,
streaming (tool arguments in fragments), usage, the request built from a
conversation with tool results, error mapping, and an Agent run end to end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web

from journal import Agent, Journal, Msg, RuntimeContext
from journal.events import TextBlock, ToolResultBlock, ToolUseBlock
from journal.models.anthropic import AnthropicModel
from journal.models.common import (
    ModelAuthError,
    ModelRateLimitError,
    ModelRequestError,
    ModelResponseError,
    ModelUnavailableError,
    Usage,
)
from journal.models.openai import OpenAIChatModel
from journal.runtime.tools import ToolSpec

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

FIXTURES = Path(__file__).parent / "fixtures"

WEATHER = ToolSpec(
    "get_weather",
    "Today's weather in a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


@dataclass
class Replay:
    """Answers each request with the next (status, fixture) and records it."""

    url: str = ""
    script: list[tuple[int, str | bytes]] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.paths.append(request.path)
        self.seen.append(await request.json())
        status, name = self.script.pop(0)
        body = name if isinstance(name, bytes) else (FIXTURES / name).read_bytes()
        stream = isinstance(name, str) and name.endswith(".sse")
        kind = "text/event-stream" if stream else "application/json"
        return web.Response(status=status, body=body, content_type=kind)


@pytest.fixture
async def replay() -> AsyncIterator[Replay]:
    state = Replay()
    app = web.Application()
    app.router.add_post("/{tail:.*}", state.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}"
    yield state
    await runner.cleanup()


def openai_model(replay: Replay, **kw: Any) -> OpenAIChatModel:
    return OpenAIChatModel(
        "gpt-4o-mini",
        base_url=replay.url + "/v1",
        api_key="sk-test",
        max_retries=0,
        **kw,
    )


def anthropic_model(replay: Replay, **kw: Any) -> AnthropicModel:
    return AnthropicModel(
        "claude-sonnet-4-5",
        base_url=replay.url,
        api_key="sk-ant-test",
        max_retries=0,
        **kw,
    )


CONVERSATION = [
    Msg("system", "Be brief."),
    Msg("user", "Weather in Paris?"),
    Msg(
        "assistant",
        [TextBlock("Checking."), ToolUseBlock("c1", "get_weather", {"city": "Paris"})],
    ),
    Msg("tool", [ToolResultBlock("c1", {"temp": 18, "sky": "sunny"})]),
]


# --- OpenAI --------------------------------------------------------------------


async def test_openai_tool_call(replay: Replay) -> None:
    replay.script = [(200, "openai_tool_call.json")]
    model = openai_model(replay)
    reply = await model([Msg("user", "Weather in Paris?")], [WEATHER])
    assert reply.text is None
    (call,) = reply.tool_calls
    assert (call.name, call.input, call.id) == (
        "get_weather",
        {"city": "Paris"},
        "call_abc123",
    )
    assert model.last_usage == Usage(82, 17)
    assert replay.paths == ["/v1/chat/completions"]
    sent = replay.seen[0]
    assert sent["model"] == "gpt-4o-mini"
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Today's weather in a city.",
                "parameters": WEATHER.input_schema,
            },
        }
    ]


async def test_openai_request_carries_tool_results(replay: Replay) -> None:
    replay.script = [(200, "openai_text.json")]
    model = openai_model(replay, temperature=0)
    reply = await model(CONVERSATION, [WEATHER])
    assert reply.text == "It's 18 C and sunny in Paris."
    assert reply.tool_calls == []
    sent = replay.seen[0]
    assert sent["temperature"] == 0
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Paris"}',
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": '{"temp": 18, "sky": "sunny"}',
        },
    ]


async def test_openai_stream(replay: Replay) -> None:
    replay.script = [(200, "openai_stream.sse")]
    model = openai_model(replay, stream=True)
    reply = await model([Msg("user", "Weather in Oslo, and the time?")], [WEATHER])
    assert reply.text == "Checking now."
    assert [(c.id, c.name, c.input) for c in reply.tool_calls] == [
        ("call_s1", "get_weather", {"city": "Oslo"}),
        ("call_s2", "get_time", {}),
    ]
    assert model.last_usage == Usage(50, 30)
    assert replay.seen[0]["stream"] is True
    assert replay.seen[0]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("status", "fixture", "error", "transient"),
    [
        (429, "openai_error_429.json", ModelRateLimitError, True),
        (401, "openai_error_401.json", ModelAuthError, False),
        (400, "openai_error_401.json", ModelRequestError, False),
        (503, "openai_error_429.json", ModelUnavailableError, True),
    ],
)
async def test_openai_errors(
    replay: Replay, status: int, fixture: str, error: type[Exception], transient: bool
) -> None:
    replay.script = [(status, fixture)]
    with pytest.raises(error) as info:
        await openai_model(replay)([Msg("user", "hi")], [])
    assert info.value.status == status  # type: ignore[attr-defined]
    assert info.value.transient is transient  # type: ignore[attr-defined]
    assert "openai" in str(info.value)


async def test_openai_unreachable() -> None:
    model = OpenAIChatModel(
        "m", base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0
    )
    with pytest.raises(ModelUnavailableError) as info:
        await model([Msg("user", "hi")], [])
    assert info.value.status is None


async def test_openai_bad_tool_arguments(replay: Replay) -> None:
    body = json.loads((FIXTURES / "openai_tool_call.json").read_text())
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = (
        "{not json"
    )
    replay.script = [(200, json.dumps(body).encode())]
    with pytest.raises(ModelResponseError, match="not JSON"):
        await openai_model(replay)([Msg("user", "hi")], [WEATHER])


# --- Anthropic -----------------------------------------------------------------


async def test_anthropic_tool_use(replay: Replay) -> None:
    replay.script = [(200, "anthropic_tool_use.json")]
    model = anthropic_model(replay)
    reply = await model([Msg("user", "Weather in Paris?")], [WEATHER])
    assert reply.text == "I'll check the weather."
    (call,) = reply.tool_calls
    assert (call.name, call.input, call.id) == (
        "get_weather",
        {"city": "Paris"},
        "toolu_01A09q90qw90lq917835lq9",
    )
    assert model.last_usage == Usage(412, 64)
    assert replay.paths == ["/v1/messages"]
    assert replay.seen[0]["tools"] == [
        {
            "name": "get_weather",
            "description": "Today's weather in a city.",
            "input_schema": WEATHER.input_schema,
        }
    ]
    assert replay.seen[0]["max_tokens"] == 4096


async def test_anthropic_request_carries_tool_results(replay: Replay) -> None:
    replay.script = [(200, "anthropic_text.json")]
    model = anthropic_model(replay)
    reply = await model([*CONVERSATION, Msg("user", "Thanks!")], [WEATHER])
    assert reply.text == "It's 18 C and sunny in Paris."
    sent = replay.seen[0]
    assert sent["system"] == "Be brief."
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "c1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",  # the tool result and the next user text, one turn
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "content": '{"temp": 18, "sky": "sunny"}',
                    "is_error": False,
                },
                {"type": "text", "text": "Thanks!"},
            ],
        },
    ]
    assert model.total_usage == Usage(500, 12)


async def test_anthropic_stream(replay: Replay) -> None:
    replay.script = [(200, "anthropic_stream.sse")]
    model = anthropic_model(replay, stream=True)
    reply = await model([Msg("user", "Weather in Oslo?")], [WEATHER])
    assert reply.text == "Let me check."
    assert [(c.id, c.name, c.input) for c in reply.tool_calls] == [
        ("toolu_01S", "get_weather", {"city": "Oslo"})
    ]
    assert model.last_usage == Usage(472, 89)
    assert replay.seen[0]["stream"] is True


@pytest.mark.parametrize(
    ("status", "fixture", "error", "transient"),
    [
        (529, "anthropic_error_529.json", ModelUnavailableError, True),
        (400, "anthropic_error_400.json", ModelRequestError, False),
        (429, "anthropic_error_529.json", ModelRateLimitError, True),
        (403, "anthropic_error_400.json", ModelAuthError, False),
    ],
)
async def test_anthropic_errors(
    replay: Replay, status: int, fixture: str, error: type[Exception], transient: bool
) -> None:
    replay.script = [(status, fixture)]
    with pytest.raises(error) as info:
        await anthropic_model(replay)([Msg("user", "hi")], [])
    assert info.value.status == status  # type: ignore[attr-defined]
    assert info.value.transient is transient  # type: ignore[attr-defined]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="model name"):
        OpenAIChatModel("", api_key="k")
    with pytest.raises(ValueError, match="max_tokens"):
        AnthropicModel("m", max_tokens=0, api_key="k")


# --- end to end: an Agent on each client -----------------------------------------


def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"18 C and sunny in {city}"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_agent_run(replay: Replay, provider: str) -> None:
    if provider == "openai":
        replay.script = [(200, "openai_tool_call.json"), (200, "openai_text.json")]
        model: Any = openai_model(replay)
    else:
        replay.script = [(200, "anthropic_tool_use.json"), (200, "anthropic_text.json")]
        model = anthropic_model(replay)
    journal = Journal.open(f"memory://models-{provider}")
    async with Agent(
        name="Assistant",
        agent_id="assistant",
        model=model,
        tools=[get_weather],
        journal=journal,
    ) as agent:
        reply = await agent.call(
            [Msg("user", "Weather in Paris?")],
            RuntimeContext(user_id="u", session_id=provider),
        )
    assert "sunny" in str(reply)
    # The second request carried the tool's result back under the provider's id.
    second = json.dumps(replay.seen[1])
    assert "18 C and sunny in Paris" in second
    assert (
        "call_abc123" if provider == "openai" else "toolu_01A09q90qw90lq917835lq9"
    ) in second
