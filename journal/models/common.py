"""What the model clients share: usage, errors, and the status-to-error mapping."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from journal.events import ToolResultBlock, ToolUseBlock

if TYPE_CHECKING:
    from journal.events import Msg

__all__ = [
    "ModelAuthError",
    "ModelError",
    "ModelRateLimitError",
    "ModelRequestError",
    "ModelResponseError",
    "ModelUnavailableError",
    "Usage",
    "error_for_status",
    "in_call_order",
    "text_of",
]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one call (or a client's calls so far) used."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
        )


class ModelError(Exception):
    """A model provider's call failed.

    Attributes:
        provider: ``"openai"`` or ``"anthropic"`` (or the compatible server's).
        status: The HTTP status, or None when no reply came.
        transient: Whether retrying later may succeed.
    """

    transient = False

    def __init__(self, provider: str, message: str, status: int | None = None) -> None:
        super().__init__(
            f"{provider}: {message}" + (f" (HTTP {status})" if status else "")
        )
        self.provider = provider
        self.status = status


class ModelAuthError(ModelError):
    """The credentials were refused (401/403): fix the key, do not retry."""


class ModelRequestError(ModelError):
    """The request was refused as invalid (400/404/413/422): fix the request."""


class ModelRateLimitError(ModelError):
    """Rate limited (429): retry after a pause."""

    transient = True


class ModelUnavailableError(ModelError):
    """The provider failed or could not be reached (5xx, 529, connection)."""

    transient = True


class ModelResponseError(ModelError):
    """The reply could not be understood (for example tool arguments not JSON)."""


def error_for_status(provider: str, status: int, message: str) -> ModelError:
    """The error class for an HTTP status."""
    if status in (401, 403):
        return ModelAuthError(provider, message, status)
    if status == 429:
        return ModelRateLimitError(provider, message, status)
    if status >= 500:
        return ModelUnavailableError(provider, message, status)
    return ModelRequestError(provider, message, status)


def text_of(output: Any) -> str:
    """A tool's output as the text sent back to a model."""
    return output if isinstance(output, str) else json.dumps(output, default=str)


def _results_of(msg: Msg) -> list[str]:
    """The call ids a message answers (a tool message's results)."""
    if isinstance(msg.content, str):
        return []
    return [b.tool_use_id for b in msg.content if isinstance(b, ToolResultBlock)]


def in_call_order(messages: list[Msg]) -> list[Msg]:
    """``messages`` with each tool result moved up to follow its call's message.

    Both providers require every tool call to be answered before anything else
    comes. The context can hold a result later than that: a durable run cut short
    during a call leaves it without a result (for the next holder's policy) and
    ends with an ``[interrupted]`` reply, then the call's reconciled result comes
    at the end. A result message is moved to just after the assistant message that
    holds its call, results in the order of the calls; everything else keeps its
    place.
    """
    answered: dict[str, int] = {}
    for index, msg in enumerate(messages):
        for call_id in _results_of(msg):
            answered.setdefault(call_id, index)
    out: list[Msg] = []
    moved: set[int] = set()
    for index, msg in enumerate(messages):
        if index in moved:
            continue
        out.append(msg)
        if msg.role != "assistant" or isinstance(msg.content, str):
            continue
        for block in msg.content:
            if not isinstance(block, ToolUseBlock):
                continue
            at = answered.get(block.id)
            if at is not None and at > index and at not in moved:
                # Results that follow in place are already in order: moving them
                # all the same keeps one rule (the calls' order).
                moved.add(at)
                out.append(messages[at])
    return out
