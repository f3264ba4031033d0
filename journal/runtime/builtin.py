"""Built-in tools a model may be given: todos and plan mode.

They change the thread's state through the call's context, inside the run, so
journal and snapshot mode record the same thing. All three are read-only (they
change only the agent's own state), so plan mode offers them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Evaluated at run time: tool() reads the hints to find the context parameter.
from journal.runtime.context import RuntimeContext  # noqa: TC001
from journal.runtime.tools import Tool, tool

if TYPE_CHECKING:
    from projections.agent_state import AgentState

__all__ = ["builtin_tools", "enter_plan_mode", "exit_plan_mode", "todo_write"]


async def _todo_write(  # noqa: D417 - ctx is the runtime's, not the model's
    todos: list[dict[str, Any]], ctx: RuntimeContext, revision: int | None = None
) -> str:
    """Replace your todo list with the full, updated list.

    Args:
        todos: Every todo, each {"content": "...", "status": "pending" |
            "in_progress" | "completed"}.
        revision: The revision your list is based on (as last shown to you).
    """
    after = await ctx.tasks.write_todos(todos, expected_revision=revision)
    return f"todo list saved (revision {after.tasks_context.revision})"


async def _enter_plan_mode(  # noqa: D417 - ctx is the runtime's, not the model's
    ctx: RuntimeContext, plan_file: str | None = None
) -> str:
    """Enter plan mode: investigate and plan, change nothing until it is exited.

    Args:
        plan_file: Where the plan is written, if anywhere.
    """

    def enter(state: AgentState) -> None:
        state.plan_mode_context.active = True
        state.plan_mode_context.plan_file = plan_file

    await ctx.update_state("enter plan mode", enter)
    return "plan mode is on"


async def _exit_plan_mode(ctx: RuntimeContext) -> str:
    """Leave plan mode, once the plan is ready, to carry it out."""

    def leave(state: AgentState) -> None:
        state.plan_mode_context.active = False
        state.plan_mode_context.plan_file = None

    await ctx.update_state("exit plan mode", leave)
    return "plan mode is off"


todo_write: Tool = tool(_todo_write, name="todo_write", read_only=True)
"""Writes the todo list (revision-checked)."""

enter_plan_mode: Tool = tool(_enter_plan_mode, name="enter_plan_mode", read_only=True)
"""Turns plan mode on."""

exit_plan_mode: Tool = tool(_exit_plan_mode, name="exit_plan_mode", read_only=True)
"""Turns plan mode off."""


def builtin_tools() -> list[Tool]:
    """The built-in tools, for ``Agent(tools=[*builtin_tools(), ...])``."""
    return [todo_write, enter_plan_mode, exit_plan_mode]
