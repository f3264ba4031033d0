"""What a tool may do to the task context, through its call's ``ctx.tasks``.

A tool proposes requirements, binds evidence, records object versions and writes
todos; it never decides a requirement or records a verification (those are the
application's, through the ``Agent``). Each change is validated by
:mod:`journal.runtime.tasks` against the run's current state and committed inside
the run as its specific events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from journal.runtime import tasks
from journal.runtime.copies import state_copy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from journal import events as ev
    from journal.runtime.scope import RunScope
    from projections.agent_state import AgentState

__all__ = ["TaskTools"]


class TaskTools:
    """The task operations open to a tool (``ctx.tasks``).

    Args:
        scope: The run the tool was called by.
        by: Who acts (recorded in the events): the run, unless a tool names itself.
    """

    def __init__(self, scope: RunScope, by: str = "") -> None:
        self._scope = scope
        self._by = by or f"run {scope.run_id}"

    @property
    def view(self) -> tasks.TaskView:
        """The current task as the run sees it (read-only)."""
        return tasks.task_view(self._scope.state)

    async def propose_requirement(self, text: str, note: str = "") -> AgentState:
        """Propose a requirement; it stays ``proposed`` until the application decides.

        Raises:
            TaskError: No task has begun, or it has this requirement already.
        """
        events = tasks.propose_requirement(self._scope.state, text, note, self._by)
        return await self._scope.commit(events)

    async def bind_evidence(
        self,
        requirement: str,
        evidence: str,
        object_id: str | None = None,
        object_version: ev.ObjectVersion | None = None,
    ) -> AgentState:
        """Bind evidence to a requirement, with the version of what it verified.

        The evidence becomes stale when that object's version changes.

        Raises:
            TaskError: An unknown or rejected requirement, or a version older than
                the object's current one.
        """
        events = tasks.bind_evidence(
            self._scope.state,
            requirement,
            evidence,
            object_id,
            object_version,
            self._by,
        )
        return await self._scope.commit(events)

    async def set_object_version(
        self, object_id: str, version: ev.ObjectVersion
    ) -> AgentState:
        """Record that an object (a file, a record, ...) is now at ``version``."""
        events = tasks.set_object_version(self._scope.state, object_id, version)
        if not events:
            return state_copy(self._scope.state)
        return await self._scope.commit(events)

    async def write_todos(
        self,
        todos: Sequence[dict[str, Any]],
        expected_revision: int | None = None,
    ) -> AgentState:
        """Replace the todo list (its revision goes up by one).

        Raises:
            TodoRevisionError: ``expected_revision`` is not the current revision.
            TaskError: A todo is not ``{"content": str, "status": ...}``.
        """
        events = tasks.write_todos(
            self._scope.state, todos, expected_revision, self._by
        )
        return await self._scope.commit(events)
