"""``AnthropicModel``: the runtime's ``Model`` on Anthropic's messages API.

System messages go in ``system``; consecutive messages of one role are merged
(the API alternates user and assistant); tool results travel as ``tool_result``
blocks of a user turn. Streaming uses the SDK's message stream and returns its
final message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anthropic

from journal.events import TextBlock, ToolResultBlock, ToolUseBlock
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

__all__ = ["AnthropicModel", "to_anthropic_messages", "to_anthropic_tools"]

_PROVIDER = "anthropic"


def _blocks(msg: Msg) -> list[dict[str, Any]]:
    if isinstance(msg.content, str):
        return [{"type": "text", "text": msg.content}] if msg.content else []
    out: list[dict[str, Any]] = []
    for b in msg.content:
        if isinstance(b, TextBlock) and b.text:
            out.append({"type": "text", "text": b.text})
        elif isinstance(b, ToolUseBlock):
            out.append(
                {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
            )
        elif isinstance(b, ToolResultBlock):
            out.append(
                {
                    "type": "tool_result",
                    "tool_use_id": b.tool_use_id,
                    "content": text_of(b.output),
                    "is_error": b.is_error,
                }
            )
    return out


def to_anthropic_messages(messages: list[Msg]) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the alternating user/assistant turns."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for msg in in_call_order(messages):
        if msg.role == "system":
            system.append(msg.text)
            continue
        role = "assistant" if msg.role == "assistant" else "user"
        blocks = _blocks(msg)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(s for s in system if s), turns


def to_anthropic_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs in the messages API's form."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools
    ]


class AnthropicModel:
    """A :class:`journal.Model` on ``client.messages.create``.

    Args:
        model: The model name (``"claude-sonnet-4-5"``...).
        max_tokens: The reply's token limit (the API requires one).
        client: An ``anthropic.AsyncAnthropic`` to use; by default one is made from
            ``base_url``, ``api_key`` and ``max_retries``.
        base_url: Another endpoint (a proxy, a compatible server).
        api_key: The key (default: the SDK reads ``ANTHROPIC_API_KEY``).
        stream: Stream the reply (assembled before returning).
        max_retries: The SDK's own retries of connection errors, 408/409/429/5xx.
        **options: Sent with every request (``temperature``...).

    Attributes:
        last_usage: Tokens of the last call. total_usage: of every call.
    """

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int = 4096,
        client: anthropic.AsyncAnthropic | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = False,
        max_retries: int = 2,
        **options: Any,
    ) -> None:
        if not model:
            raise ValueError("AnthropicModel needs a model name")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, not {max_tokens}")
        self.model = model
        self.max_tokens = max_tokens
        self.client = client or anthropic.AsyncAnthropic(
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
        system, turns = to_anthropic_messages(messages)
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": turns,
            **self.options,
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = to_anthropic_tools(tools)
        try:
            if self.stream:
                async with self.client.messages.stream(**request) as stream:
                    reply = await stream.get_final_message()
            else:
                reply = await self.client.messages.create(**request)
        except anthropic.APIStatusError as exc:
            raise error_for_status(_PROVIDER, exc.status_code, exc.message) from exc
        except anthropic.APIConnectionError as exc:
            raise ModelUnavailableError(_PROVIDER, str(exc)) from exc
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in reply.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                if not isinstance(block.input, dict):
                    raise ModelResponseError(
                        _PROVIDER, f"tool call {block.name!r} input is not an object"
                    )
                calls.append(ToolCall(block.name, block.input, block.id))
        self.last_usage = Usage(reply.usage.input_tokens, reply.usage.output_tokens)
        self.total_usage = self.total_usage + self.last_usage
        return ModelResponse(text="".join(text) or None, tool_calls=calls)
