"""The runtime's value types: the call context, model I/O, and a scripted model.

Public through ``journal`` (and ``journal.runtime``): :class:`RuntimeContext`,
:class:`Model`, :class:`ModelResponse`, :class:`ToolCall`, :class:`ToolSpec` and
:class:`ScriptedModel`.
"""

from __future__ import annotations

import inspect
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload, runtime_checkable

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator

from journal.keys import MAX_ID_LENGTH
from projections.agent_state import AgentState

if TYPE_CHECKING:
    from journal.events import Msg

__all__ = [
    "Model",
    "ModelResponse",
    "RuntimeContext",
    "ScriptItem",
    "ScriptedModel",
    "ToolCall",
    "ToolSpec",
]

T = TypeVar("T")


def _new_id() -> str:
    return uuid.uuid4().hex


def _check_id(value: str, field_name: str) -> str:
    if not value:
        raise ValueError(f"{field_name} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise ValueError(
            f"{field_name} is {len(value)} characters long; the limit is "
            f"{MAX_ID_LENGTH}"
        )
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise ValueError(f"{field_name} contains the control character {ch!r}")
    return value


class _Unset:
    """Marks an absent default in :meth:`RuntimeContext.get`."""


_UNSET = _Unset()


class RuntimeContext(BaseModel):
    """The identity of one request, and call-scoped attributes for its tools.

    A context is cheap: build a fresh one per request. Its ids say which thread a
    call continues; everything else about the session lives in the journal (or the
    snapshot store). Attributes put on a context are runtime-only: they are never
    persisted and never sent to a model.

    Args:
        user_id: The user, or None for the anonymous user.
        session_id: The session; None falls back to the agent's
            ``default_session_id``.
        thread_id: The thread within the session.
        run_id: An explicit id for the next run (it must be new to the thread); None
            lets the runtime generate one per execution.
        turn_id: An application turn id, recorded in ``RunStarted``.

    Raises:
        ValueError: An id is empty or blank (``run_id``), longer than 256 characters,
            or contains a control character (``pydantic.ValidationError`` is a
            ``ValueError``).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)

    user_id: str | None = None
    session_id: str | None = None
    thread_id: str = "main"
    run_id: str | None = None
    turn_id: str | None = None

    _extra: dict[str, Any] = PrivateAttr(default_factory=dict)
    _typed: dict[type[Any], Any] = PrivateAttr(default_factory=dict)
    _agent_state: AgentState | None = PrivateAttr(default=None)

    @field_validator("user_id", "session_id", "thread_id", "turn_id")
    @classmethod
    def _valid_id(cls, value: str | None, info: Any) -> str | None:
        return None if value is None else _check_id(value, info.field_name)

    @field_validator("run_id")
    @classmethod
    def _valid_run_id(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("run_id must not be blank; leave it None to generate one")
        return None if value is None else _check_id(value, "run_id")

    @classmethod
    def empty(cls) -> RuntimeContext:
        """A context with every id unset (anonymous user, default session)."""
        return cls()

    @property
    def extra(self) -> dict[str, Any]:
        """The string-keyed attributes (the live mapping; changes show through)."""
        return self._extra

    @property
    def agent_state(self) -> AgentState | None:
        """The call-scoped state, injected at call entry (None outside a call).

        During a call it is the state the run is building; treat it as read-only and
        change state through the agent's methods.
        """
        return self._agent_state

    @overload
    def put(self, key: str, value: Any) -> None: ...

    @overload
    def put(self, key: type[T], value: T) -> None: ...

    def put(self, key: str | type[Any], value: Any) -> None:
        """Attach a runtime-only attribute, by name or by type.

        Args:
            key: A string, or a type; a type key needs an instance of that type.
            value: The attribute.

        Raises:
            TypeError: ``key`` is neither a str nor a type, or ``value`` is not an
                instance of the type key.
        """
        if isinstance(key, str):
            self._extra[key] = value
        elif isinstance(key, type):
            if not isinstance(value, key):
                raise TypeError(
                    f"a value put under the type {key.__name__} must be an instance "
                    f"of it, not {type(value).__name__}"
                )
            self._typed[key] = value
        else:
            raise TypeError(f"key must be a str or a type, not {type(key).__name__}")

    @overload
    def get(self, key: type[T]) -> T | None: ...

    @overload
    def get(self, key: type[T], default: T) -> T: ...

    @overload
    def get(self, key: str, default: Any = None) -> Any: ...

    def get(self, key: str | type[Any], default: Any = _UNSET) -> Any:
        """Read an attribute put by name or by type.

        Args:
            key: The string or type it was put under.
            default: Returned when absent (None unless given).
        """
        fallback = None if default is _UNSET else default
        if isinstance(key, str):
            return self._extra.get(key, fallback)
        return self._typed.get(key, fallback)

    async def resolve_agent_state(self, agent: _StateSource) -> AgentState:
        """The injected call-scoped state, else the thread's state loaded by ``agent``.

        Call it as ``RuntimeContext.resolve_agent_state(ctx, agent)`` or
        ``ctx.resolve_agent_state(agent)``.
        """
        if self._agent_state is not None:
            return self._agent_state
        return await agent.get_agent_state(self)

    def _derive(self, run_id: str) -> RuntimeContext:
        """The context a run's tools see: same attributes, this execution's run id."""
        derived = self.model_copy(update={"run_id": run_id})
        # model_copy copies the private dict shallowly; share the attribute maps so
        # what a tool puts is visible to the caller.
        derived._extra = self._extra
        derived._typed = self._typed
        derived._agent_state = self._agent_state
        return derived


class _StateSource(Protocol):
    async def get_agent_state(
        self,
        user_id: str | RuntimeContext | None,
        session_id: str | None = None,
        thread_id: str = "main",
    ) -> AgentState: ...


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is told about one tool.

    Attributes:
        name: The tool's name (``[A-Za-z0-9_-]``, at most 64 characters).
        description: What it does; a function's docstring by default.
        input_schema: The JSON schema of its input object.
    """

    name: str
    description: str
    input_schema: dict[str, Any]


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
