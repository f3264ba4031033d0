"""Model I/O: what a model returns, the protocol it follows, and a scripted model.

Public through ``journal`` (and ``journal.runtime``): :class:`Model`,
:class:`ModelResponse`, :class:`ToolCall`, :class:`ScriptedModel` and
:data:`ScriptItem`. :func:`as_response` coerces a model's answer.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from journal.events import Msg
    from journal.runtime.tools import ToolSpec

__all__ = [
    "Model",
    "ModelResponse",
    "ScriptItem",
    "ScriptedModel",
    "ToolCall",
    "as_response",
]


def _new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model's request to run a tool.

    Attributes:
        name: The tool to run.
        input: Its input, normally a JSON object (validated against the schema).
        id: The call id; it becomes the journal's ``call_id`` and the
            ``tool_use_id`` of the result sent back to the model.
    """

    name: str
    input: Any
    id: str = field(default_factory=_new_id)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One model turn: a text reply, tool calls, or both.

    Attributes:
        text: The text (None for none).
        tool_calls: The tools to run before the model is called again; empty for a
            final reply.
    """

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


@runtime_checkable
class Model(Protocol):
    """A chat model the runtime drives.

    Any object with this async ``__call__`` will do (a plain ``async def`` too).
    """

    async def __call__(
        self, messages: list[Msg], tools: list[ToolSpec]
    ) -> ModelResponse:
        """Answer the conversation so far.

        Args:
            messages: The thread's context (a summary, if any, comes first as a
                system message). The model may not modify the messages.
            tools: The tools it may call.

        Returns:
            Text, tool calls, or both.
        """
        ...


ScriptResult = str | ModelResponse
ScriptItem = (
    str
    | ModelResponse
    | Callable[[list["Msg"]], ScriptResult]
    | Callable[[list["Msg"]], Awaitable[ScriptResult]]
)
"""One step of a :class:`ScriptedModel`: a reply, or a function of the messages."""


class ScriptedModel:
    """A deterministic model for tests and demos: replays a script in order.

    Args:
        script: Items answered one per call: a ``str`` (a final text reply), a
            ``ModelResponse``, or a function (sync or async) of the messages returning
            one of those.

    Attributes:
        calls: The messages of every call so far (copies), for assertions.
        tools_seen: The tool specs offered at every call so far.
    """

    def __init__(self, script: Iterable[ScriptItem]) -> None:
        self._script = list(script)
        self._next = 0
        self.calls: list[list[Msg]] = []
        self.tools_seen: list[list[ToolSpec]] = []

    @property
    def remaining(self) -> int:
        """How many items are left."""
        return len(self._script) - self._next

    async def __call__(
        self, messages: list[Msg], tools: list[ToolSpec]
    ) -> ModelResponse:
        """Answer with the next script item.

        Raises:
            RuntimeError: The script ran out.
            TypeError: An item (or a function's result) is not a str or a
                ``ModelResponse``.
        """
        self.calls.append(list(messages))
        self.tools_seen.append(list(tools))
        if self._next >= len(self._script):
            raise RuntimeError(
                f"ScriptedModel script ran out: it has {len(self._script)} item(s) "
                f"and was called {len(self.calls)} times; the last message was "
                f"{_preview(messages)}"
            )
        item = self._script[self._next]
        self._next += 1
        result: object = item
        if callable(item):
            result = item(list(messages))
            if inspect.isawaitable(result):
                result = await result
        return as_response(result)


def as_response(value: object) -> ModelResponse:
    """Coerce a model's answer (a ``ModelResponse`` or a ``str``).

    Raises:
        TypeError: It is neither.
    """
    if isinstance(value, ModelResponse):
        return value
    if isinstance(value, str):
        return ModelResponse(text=value)
    raise TypeError(
        f"a model must return a ModelResponse (or a str), not {type(value).__name__}"
    )


def _preview(messages: list[Msg]) -> str:
    if not messages:
        return "(none)"
    last = messages[-1]
    text = last.text or repr(last.content)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{last.role}: {text!r}"
