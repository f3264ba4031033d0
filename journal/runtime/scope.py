"""The run a piece of code runs inside: how tools change state, and how sub-agents link.

While a run executes a tool, a :class:`RunScope` is current (a context variable, so
it follows the tool into tasks and worker threads it starts). Through it a tool
changes the thread's state inside the run — committed by the run's sink, in
journal and snapshot mode alike — and an ``Agent`` called from the tool finds that
its own thread is busy with this very run (then it routes state changes into the
run instead of waiting for a lease the run holds) or that it is a sub-agent (then
its run records this one as its parent).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import TYPE_CHECKING

from journal.engine.diff import diff_states
from journal.runtime.copies import detached, own_messages, state_copy
from projections.agent_state import AgentState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from journal.codec import Record
    from journal.keys import ThreadKey
    from journal.runtime.sinks import Sink

__all__ = ["RunScope", "current_scope", "enclosing_scope"]

logger = logging.getLogger("journal.runtime")

_CURRENT: contextvars.ContextVar[RunScope | None] = contextvars.ContextVar(
    "journal_run_scope", default=None
)


class RunScope:
    """One run as seen from its tools: its thread, its sink, its state view.

    Args:
        owner: Where the thread lives (the agent's journal or state store): two
            agents over the same owner and key are on the same thread.
        key: The run's thread.
        run_id: The run.
        sink: Where the run commits.
        emit: Reports each committed record to the run's streams.
        parent: The scope that was current when the run started (its parent run's,
            for a sub-agent), else None.

    Attributes:
        owner: See above.
        key: The run's thread.
        run_id: The run.
        parent: The enclosing run's scope, if any.
        task: The run's task (set by the loop), so that closing an agent from
            inside the run does not wait for the run itself.
    """

    def __init__(
        self,
        owner: object,
        key: ThreadKey,
        run_id: str,
        sink: Sink,
        emit: Callable[[Record], None],
        parent: RunScope | None,
    ) -> None:
        self.owner = owner
        self.key = key
        self.run_id = run_id
        self.parent = parent
        self.task: asyncio.Task[object] | None = None
        self._sink = sink
        self._emit = emit
        self._lock = asyncio.Lock()
        self._view: AgentState | None = None
        self._open = True

    @property
    def open(self) -> bool:
        """Whether the run is still going (state changes are accepted)."""
        return self._open

    def close(self) -> None:
        """The run ended: later state changes through it are refused."""
        self._open = False
        self._view = None

    @property
    def state(self) -> AgentState:
        """The state the run has committed so far (the live object: do not edit)."""
        return self._sink.state

    # --- the tool's view of the state ---

    def view(self) -> AgentState:
        """The state a tool sees as ``ctx.agent_state``: a copy it may edit.

        Made on first use within a tool call; edits to it are committed when the
        tool returns (or before the tool's next ``update_state``). It is a
        :func:`~journal.runtime.copies.state_copy`: a message is copied only when
        the tool reads it, so the view costs the same on a thread of any length.
        """
        if self._view is None:
            self._view = state_copy(self._sink.state)
        return self._view

    def begin_tool(self) -> None:
        """A tool call starts: it gets a fresh view on first use."""
        self._view = None

    async def settle(self, reason: str) -> None:
        """Commit what the tool changed in its view directly, as specific events.

        Raises:
            ValueError: The view changes what only the log's events may change
                (the thread's identity, its runs, its pending tool calls).
        """
        view = self._view
        if view is None:
            return
        async with self._lock:
            await self._commit_state(view, reason)

    async def _commit_state(self, new: AgentState, reason: str) -> None:
        """Commit the change from the run's state to ``new`` (a copy's edits)."""
        current = self._sink.state
        plain = detached(new)
        # Checked here, so that a refused change commits nothing.
        events = diff_states(current, plain)
        if events is None:
            # A whole-state record: it keeps the messages it is given, so give it
            # ones nobody else holds.
            whole = plain.copy()
            whole.version = current.version
            record = await self._sink.update(reason, lambda _: whole, self.run_id)
        elif events:
            record = await self._sink.commit(own_messages(events), self.run_id)
        else:
            record = None
        if record is not None:
            self._emit(record)

    # --- changes made through the context ---

    async def update(
        self, reason: str, mutation: Callable[[AgentState], AgentState | None]
    ) -> AgentState:
        """Apply ``mutation`` to a copy of the run's state and commit the change.

        Direct edits of the tool's view are committed first, so the order of what a
        tool did is kept; the view then shows the result.

        Returns:
            A copy of the state after the change.

        Raises:
            RuntimeError: The run is over.
            ValueError: The change touches the thread's identity, runs or pending
                calls.
            TypeError: ``mutation`` returned something other than an AgentState.
        """

        async def write() -> None:
            copy = state_copy(self._sink.state)
            result = mutation(copy)
            new = copy if result is None else result
            if not isinstance(new, AgentState):
                raise TypeError(
                    f"mutation returned {type(new).__name__}, not an AgentState"
                )
            await self._commit_state(new, reason)

        return await self._write(write, f"{reason} (direct edits first)")

    async def commit(self, events: list[object]) -> AgentState:
        """Commit ``events`` inside the run; returns a copy of the state after."""

        async def write() -> None:
            record = await self._sink.commit(events, self.run_id)
            if record is not None:
                self._emit(record)

        return await self._write(write, "direct edits")

    async def _write(
        self, write: Callable[[], Awaitable[None]], view_reason: str
    ) -> AgentState:
        """Commit the view's direct edits, then ``write``; rebase the view."""
        self._check_open()
        async with self._lock:
            if self._view is not None:
                await self._commit_state(self._view, view_reason)
            await write()
            self._rebase()
            return state_copy(self._sink.state)

    def _rebase(self) -> None:
        # The tool may hold the view object: refresh it in place.
        view = self._view
        if view is None:
            return
        fresh = state_copy(self._sink.state)
        for name in view.__struct_fields__:
            setattr(view, name, getattr(fresh, name))

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError(
                f"run {self.run_id} on {self.key} is over; change the thread's state "
                "through the agent's methods"
            )

    def __repr__(self) -> str:
        return f"RunScope({self.run_id!r}, {str(self.key)!r})"

    # --- the context variable ---

    def enter(self) -> contextvars.Token[RunScope | None]:
        """Make this scope current (in this task and what it starts)."""
        return _CURRENT.set(self)

    @staticmethod
    def leave(token: contextvars.Token[RunScope | None]) -> None:
        """Restore the scope that was current before :meth:`enter`."""
        _CURRENT.reset(token)


def current_scope() -> RunScope | None:
    """The innermost open run scope of the running code, if any."""
    scope = _CURRENT.get()
    while scope is not None and not scope.open:
        scope = scope.parent
    return scope


def enclosing_scope(owner: object, key: ThreadKey) -> RunScope | None:
    """The open run on ``owner``'s thread ``key`` that the running code is inside."""
    scope = current_scope()
    while scope is not None:
        if scope.open and scope.owner is owner and scope.key == key:
            return scope
        scope = scope.parent
    return None
