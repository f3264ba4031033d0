"""What each model call sees: system text, a view of the state, and the tools offered.

A :class:`RequestBuilder` turns the thread's state into one :class:`ModelRequest`
per model call. Nothing it builds is persisted: the system prompt, the summary and
the view of tasks and plan mode are generated afresh for every call, so
``clear_context`` cannot erase them and the log never holds them. Subclass it (or
pass ``Agent(request_builder=...)``) to change any part.

The tools offered follow the state: a tool of a group is offered only while its
group is active, a ``deny`` rule hides a tool, and plan mode offers only read-only
tools. The run loop applies the same rules to a call the model makes anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from journal import events as ev
from journal.runtime.tasks import render_task

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from journal.runtime.tools import Tool, ToolSpec
    from projections.agent_state import AgentState

__all__ = ["ModelRequest", "RequestBuilder", "decision_for", "refusal_for"]

Decision = Literal["allow", "deny", "ask"]

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call's input.

    Attributes:
        messages: What the model reads, generated system messages first.
        tools: What the model is offered.
    """

    messages: list[ev.Msg]
    tools: list[ToolSpec] = field(default_factory=list)


def decision_for(state: AgentState, tool: Tool) -> Decision:
    """The permission decision for ``tool``: its rule, else ``allow``.

    The permission mode ``bypass`` turns ``ask`` into ``allow`` (``deny`` stays).
    """
    rule = state.permission_context.rules.get(tool.name, "allow")
    decision: Decision = rule if rule in ("allow", "deny", "ask") else "ask"  # type: ignore[assignment]
    if decision == "ask" and state.permission_context.mode == "bypass":
        return "allow"
    return decision


def refusal_for(state: AgentState, tool: Tool) -> str | None:
    """Why ``tool`` is not available in ``state``; None when it is offered."""
    if tool.group is not None and tool.group not in state.tool_context.active_groups:
        return f"its tool group {tool.group!r} is not active"
    if decision_for(state, tool) == "deny":
        return f"a permission rule denies the tool {tool.name!r}"
    if state.plan_mode_context.active and not tool.read_only:
        return "plan mode is on, and it offers read-only tools only"
    return None


class RequestBuilder:
    """Builds each model call's request from the state (nothing of it is stored).

    Args:
        system_prompt: The agent's instructions, sent first on every call.
    """

    def __init__(self, system_prompt: str | None = None) -> None:
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(
                f"system_prompt must be a str, not {type(system_prompt).__name__}"
            )
        self.system_prompt = system_prompt

    def build(self, state: AgentState, tools: Mapping[str, Tool]) -> ModelRequest:
        """The request for the next model call in ``state``."""
        messages = [*self.system_messages(state), *state.context]
        offered = self.offered(state, tools.values())
        return ModelRequest(messages, [t.spec for t in offered])

    def offered(self, state: AgentState, tools: Iterable[Tool]) -> list[Tool]:
        """The tools the model may call now (see :func:`refusal_for`)."""
        return [t for t in tools if refusal_for(state, t) is None]

    def system_messages(self, state: AgentState) -> list[ev.Msg]:
        """The generated system messages: prompt, summary, then the state view."""
        out: list[ev.Msg] = []
        if self.system_prompt:
            out.append(ev.Msg("system", self.system_prompt))
        if state.summary:
            out.append(ev.Msg("system", SUMMARY_PREFIX + state.summary))
        view = self.state_view(state)
        if view:
            out.append(ev.Msg("system", view))
        return out

    def state_view(self, state: AgentState) -> str:
        """The text the model is shown of plan mode and tasks ("" for none)."""
        parts: list[str] = []
        plan = state.plan_mode_context
        if plan.active:
            where = f" (plan file: {plan.plan_file})" if plan.plan_file else ""
            parts.append(
                "Plan mode is on" + where + ": investigate and write a plan; do not "
                "change anything until plan mode is exited."
            )
        tasks = render_task(state)
        if tasks:
            parts.append(tasks)
        return "\n\n".join(parts)
