"""The call context: a request's identity and its runtime-only attributes.

:class:`RuntimeContext` is public through ``journal``. The module functions
:func:`derive_context` and :func:`inject_agent_state` are the runtime's side of a
context: the copy a run's tools see, and the call-scoped state it shows.
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator

from journal.keys import MAX_ID_LENGTH
from journal.runtime.copies import StateSnapshot
from journal.runtime.scope import RunScope
from journal.runtime.task_tools import TaskTools
from projections.agent_state import AgentState

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "RuntimeContext",
    "StateSource",
    "derive_context",
    "inject_agent_state",
    "scope_of",
]

T = TypeVar("T")


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
    # A snapshot is made a state on first read (a call's result is often unread).
    _agent_state: AgentState | StateSnapshot | None = PrivateAttr(default=None)
    # Set on the context a run's tools get: the run they are called by.
    _scope: RunScope | None = PrivateAttr(default=None)

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

        In a tool, it is the tool's own copy of the run's state: what the tool
        changes in it is committed when the tool returns, as the specific events
        the change amounts to (the same in journal and snapshot mode), and a change
        that only the log may make (runs, pending calls, identity) turns the tool's
        result into an error. :meth:`update_state` commits at once. On the
        caller's context it is the state as the run left it, a copy of its own.
        Either copy shares the thread's messages until they are read (each is
        copied on its first read), so it is cheap on a long thread.
        """
        scope = self._scope
        if scope is not None and scope.open:
            return scope.view()
        return self._injected()

    def _injected(self) -> AgentState | None:
        state = self._agent_state
        if isinstance(state, StateSnapshot):
            state = self._agent_state = state.get()
        return state

    @property
    def tasks(self) -> TaskTools:
        """The task operations open to a tool (propose, bind evidence, todos).

        Raises:
            RuntimeError: Not a tool's context during its run.
        """
        scope = self._scope
        if scope is None or not scope.open:
            raise RuntimeError(
                "ctx.tasks works on the context a tool receives, during its run; "
                "the application uses the Agent's task methods"
            )
        return TaskTools(scope)

    async def update_state(
        self, reason: str, mutation: Callable[[AgentState], AgentState | None]
    ) -> AgentState:
        """Change the thread's state from inside a tool, committed within the run.

        Args:
            reason: Why (recorded when the change needs a whole-state record).
            mutation: Edits the given copy, or returns a new state.

        Returns:
            The state after the change (``ctx.agent_state`` shows it too).

        Raises:
            RuntimeError: Not called with a tool's context during its run; outside
                a run use ``Agent.update_agent_state``.
            ValueError: The change touches the thread's identity, its runs or its
                pending tool calls.
        """
        scope = self._scope
        if scope is None:
            raise RuntimeError(
                "ctx.update_state works on the context a tool receives, during its "
                "run; outside a run use Agent.update_agent_state(ctx, reason, "
                "mutation)"
            )
        return await scope.update(reason, mutation)

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

    async def resolve_agent_state(self, agent: StateSource) -> AgentState:
        """The injected call-scoped state, else the thread's state loaded by ``agent``.

        Call it as ``RuntimeContext.resolve_agent_state(ctx, agent)`` or
        ``ctx.resolve_agent_state(agent)``.
        """
        injected = self._injected()
        if injected is not None:
            return injected
        return await agent.get_agent_state(self)


class StateSource(Protocol):
    """What :meth:`RuntimeContext.resolve_agent_state` needs: an ``Agent`` will do."""

    async def get_agent_state(
        self,
        user_id: str | RuntimeContext | None,
        session_id: str | None = None,
        thread_id: str = "main",
    ) -> AgentState:
        """The thread's current state (a context may stand in for the ids)."""
        ...


def derive_context(
    ctx: RuntimeContext, run_id: str, scope: RunScope | None = None
) -> RuntimeContext:
    """The context a run's tools see: ``ctx``'s attributes, this execution's run id.

    Args:
        ctx: The caller's context.
        run_id: The run's id.
        scope: The run, as its tools see it.

    Returns:
        A copy that shares ``ctx``'s attribute maps, so what a tool puts is visible
        to the caller, and carries the same call-scoped state.
    """
    derived = ctx.model_copy(update={"run_id": run_id})
    # model_copy copies the private dict shallowly; share the attribute maps.
    derived._extra = ctx._extra
    derived._typed = ctx._typed
    derived._agent_state = ctx._agent_state
    derived._scope = scope
    return derived


def scope_of(ctx: RuntimeContext) -> RunScope | None:
    """The run whose tool was given ``ctx`` (None for a caller's own context).

    Its ``run_id`` is then that run's id, not a new run's explicit id.
    """
    return ctx._scope


def inject_agent_state(
    ctx: RuntimeContext, state: AgentState | StateSnapshot | None
) -> None:
    """Set the call-scoped state that ``ctx.agent_state`` shows.

    Args:
        ctx: The context.
        state: The state of the run in progress (or as it ended), or a snapshot
            of it made a state when first read; None for none.
    """
    ctx._agent_state = state
