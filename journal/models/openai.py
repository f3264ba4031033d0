"""``OpenAIChatModel``: the runtime's ``Model`` on OpenAI chat completions.

Works with any OpenAI-compatible server through ``base_url``. Tool calls come back
as :class:`~journal.ToolCall` with the provider's call id; streamed replies are
assembled from their deltas (tool arguments arrive in fragments, by index) and ask
for the usage chunk (``stream_options.include_usage``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import openai

from journal.events import ToolResultBlock, ToolUseBlock
from journal.models.common import (
    ModelResponseError,
    ModelUnavailableError,
    Usage,
    error_for_status,
    in_call_order,
    text_of,
)
from journal.runtime.model import ModelResponse, ToolCall

if TYPE_CHECKING:
    from journal.events import Msg
    from journal.runtime.tools import ToolSpec

__all__ = ["OpenAIChatModel", "to_openai_messages", "to_openai_tools"]

_PROVIDER = "openai"


def to_openai_messages(messages: list[Msg]) -> list[dict[str, Any]]:
    """The runtime's messages in chat-completions form (tool results one each)."""
    out: list[dict[str, Any]] = []
    for msg in in_call_order(messages):
        blocks = [] if isinstance(msg.content, str) else msg.content
        if msg.role == "tool" or any(isinstance(b, ToolResultBlock) for b in blocks):
            out.extend(
                {
                    "role": "tool",
                    "tool_call_id": b.tool_use_id,
                    "content": text_of(b.output),
                }
                for b in blocks
                if isinstance(b, ToolResultBlock)
            )
            continue
        entry: dict[str, Any] = {"role": msg.role, "content": msg.text or None}
        calls = [b for b in blocks if isinstance(b, ToolUseBlock)]
        if calls:
            entry["tool_calls"] = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {"name": b.name, "arguments": json.dumps(b.input)},
                }
                for b in calls
            ]
        elif entry["content"] is None:
            entry["content"] = ""
        out.append(entry)
    return out


def to_openai_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as chat-completions ``function`` tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            },
        }
        for t in tools
    ]


def _arguments(name: str, raw: str | None) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except ValueError as exc:
        raise ModelResponseError(
            _PROVIDER, f"tool call {name!r} has arguments that are not JSON: {raw!r}"
        ) from exc


class OpenAIChatModel:
    """A :class:`journal.Model` on ``client.chat.completions.create``.

    Args:
        model: The model name (``"gpt-4o-mini"``, or the compatible server's).
        client: An ``openai.AsyncOpenAI`` to use; by default one is made from
            ``base_url``, ``api_key`` and ``max_retries``.
        base_url: An OpenAI-compatible endpoint (``.../v1``).
        api_key: The key (default: the SDK reads ``OPENAI_API_KEY``).
        stream: Stream the reply (assembled before returning).
        max_retries: The SDK's own retries of connection errors, 408/409/429/5xx.
        **options: Sent with every request (``temperature``, ``max_tokens``...).

    Attributes:
        last_usage: Tokens of the last call. total_usage: of every call.
    """

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = False,
        max_retries: int = 2,
        **options: Any,
    ) -> None:
        if not model:
            raise ValueError("OpenAIChatModel needs a model name")
        self.model = model
        self.client = client or openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=max_retries
        )
        self.stream = stream
        self.options = options
        self.last_usage = Usage()
        self.total_usage = Usage()

    async def __call__(
        self, messages: list[Msg], tools: list[ToolSpec]
    ) -> ModelResponse:
        """Send the conversation; return the reply's text and tool calls.

        Raises:
            ModelError: The provider refused or failed (a subclass says which).
        """
        request: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(messages),
            **self.options,
        }
        if tools:
            request["tools"] = to_openai_tools(tools)
        try:
            if self.stream:
                return await self._streamed(request)
            reply = await self.client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            raise error_for_status(_PROVIDER, exc.status_code, exc.message) from exc
        except openai.APIConnectionError as exc:
            raise ModelUnavailableError(_PROVIDER, str(exc)) from exc
        if not reply.choices:
            raise ModelResponseError(_PROVIDER, "the reply has no choices")
        message = reply.choices[0].message
        calls = [
            ToolCall(
                c.function.name, _arguments(c.function.name, c.function.arguments), c.id
            )
            for c in message.tool_calls or ()
            if c.type == "function"
        ]
        if reply.usage is not None:
            self._count(reply.usage.prompt_tokens, reply.usage.completion_tokens)
        return ModelResponse(text=message.content or None, tool_calls=calls)

    async def _streamed(self, request: dict[str, Any]) -> ModelResponse:
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        stream = await self.client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
        async for chunk in stream:
            if chunk.usage is not None:
                self._count(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
            for choice in chunk.choices[:1]:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                for part in delta.tool_calls or ():
                    call = calls.setdefault(
                        part.index, {"id": "", "name": "", "args": ""}
                    )
                    if part.id:
                        call["id"] = part.id
                    if part.function is not None:
                        call["name"] += part.function.name or ""
                        call["args"] += part.function.arguments or ""
        tool_calls = [
            ToolCall(c["name"], _arguments(c["name"], c["args"]), c["id"])
            for _, c in sorted(calls.items())
        ]
        return ModelResponse(text="".join(text) or None, tool_calls=tool_calls)

    def _count(self, prompt: int | None, completion: int | None) -> None:
        self.last_usage = Usage(prompt or 0, completion or 0)
        self.total_usage = self.total_usage + self.last_usage
