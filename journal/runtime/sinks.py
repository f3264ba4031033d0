"""Where a run's events go: the thread's log, or an in-memory state to save later.

The run loop hands every batch of events to a :class:`Sink`. In journal mode a
:class:`JournalSink` commits each batch as one record; in snapshot mode a
:class:`SnapshotSink` folds it into a state that is saved to the slot after the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from journal.codec import Record
from journal.engine.diff import diff_states
from projections.agent_state import AgentState, AgentStateProjection

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from journal.engine import ThreadWriter

__all__ = ["JournalSink", "Sink", "SnapshotSink", "fold_events"]


class Sink(Protocol):
    """Where a run commits its batches of events."""

    @property
    def state(self) -> AgentState:
        """The thread's state after the batches committed so far."""
        ...

    async def commit(self, events: list[object], run_id: str) -> Record | None:
        """Commit one batch of the run ``run_id``; the record, if one was written."""
        ...

    async def update(
        self,
        reason: str,
        mutation: Callable[[AgentState], AgentState | None],
        run_id: str,
    ) -> Record | None:
        """Commit a state change (as specific events where they exist).

        Raises:
            ValueError: The change touches the identity, runs or pending calls.
            TypeError: The mutation returned something other than an AgentState.
        """
        ...


class JournalSink:
    """Commits each batch as one record of the thread's log.

    Args:
        writer: The writer holding the thread's lease.
    """

    def __init__(self, writer: ThreadWriter) -> None:
        self.writer = writer

    @property
    def state(self) -> AgentState:
        """The writer's state (after the records committed so far)."""
        return self.writer.state

    async def commit(self, events: list[object], run_id: str) -> Record | None:
        """Append the batch as one record, tagged with ``run_id``; return it."""
        return await self.writer.append(events, run_id=run_id)

    async def update(
        self,
        reason: str,
        mutation: Callable[[AgentState], AgentState | None],
        run_id: str,
    ) -> Record | None:
        """Commit the change through the writer (None when it changed nothing)."""
        return await self.writer.update(reason, mutation, run_id=run_id)


class SnapshotSink:
    """Folds each batch into an in-memory state, saved to the slot after the call.

    Args:
        state: The state the turn starts from (it is folded into in place).
        label: The thread's name in the projection's messages.
    """

    def __init__(self, state: AgentState, label: str) -> None:
        self._state = state
        self._projection = AgentStateProjection(label)

    @property
    def state(self) -> AgentState:
        """The state with every batch so far folded in."""
        return self._state

    async def commit(self, events: list[object], run_id: str) -> Record | None:
        """Fold the batch into the state; nothing is written, so return None."""
        self._state = fold_events(self._projection, self._state, events, run_id)
        return None

    async def update(
        self,
        reason: str,
        mutation: Callable[[AgentState], AgentState | None],
        run_id: str,
    ) -> Record | None:
        """Apply the change as journal mode would (same checks, same events)."""
        copy = self._state.copy()
        result = mutation(copy)
        new = copy if result is None else result
        if not isinstance(new, AgentState):
            raise TypeError(
                f"mutation returned {type(new).__name__}, not an AgentState"
            )
        events = diff_states(self._state, new)
        if events is None:
            new.version = self._state.version
            self._state = new
        elif events:
            self._state = fold_events(self._projection, self._state, events, run_id)
        return None


def fold_events(
    projection: AgentStateProjection,
    state: AgentState,
    events: Sequence[object],
    run_id: str | None,
) -> AgentState:
    """Apply ``events`` to ``state`` as if they were one record, keeping its version.

    Args:
        projection: The projection that applies them.
        state: The state to fold into.
        events: The events, in order.
        run_id: The run they belong to (None for none).

    Returns:
        The state after the events, at ``state``'s version.
    """
    # The slot's version is not a log version: keep it while folding.
    version = state.version
    record = Record(version, 0, "", "", run_id, 0.0, "", "", list(events))
    for event in events:
        state = projection.apply(state, record, event)
    state.version = version
    return state
