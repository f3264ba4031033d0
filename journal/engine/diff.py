"""Turning a state change into the events it amounts to (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING, get_args

from journal import events as ev

if TYPE_CHECKING:
    from projections.agent_state import AgentState

__all__ = ["diff_states"]

_DECISIONS = frozenset(get_args(ev.Decision))


def diff_states(old: AgentState, new: AgentState) -> list[object] | None:
    """The specific events that turn ``old`` into ``new``.

    Returns:
        The events (empty when nothing changed), or None when the change has no
        specific events and needs an ``AgentStateReplaced``.

    Raises:
        ValueError: ``new`` changes the identity, the active run or the pending
            tool calls, which only the log's own events may change.
    """
    if (new.session_id, new.thread_id, new.user_id) != (
        old.session_id,
        old.thread_id,
        old.user_id,
    ):
        raise ValueError("a state change cannot change the thread's identity")
    if new.active_run_id != old.active_run_id:
        raise ValueError(
            "the active run is set by RunStarted and its end events, "
            "not by a state change"
        )
    if new.tool_context.pending_calls != old.tool_context.pending_calls:
        raise ValueError(
            "pending tool calls are resolved by ToolCallCompleted or "
            "reconciliation, not by a state change"
        )
    if new.shutdown_interrupted != old.shutdown_interrupted:
        return None
    tasks_old, tasks_new = old.tasks_context, new.tasks_context
    if (
        tasks_old.goal,
        tasks_old.requirements,
        tasks_old.decisions,
        tasks_old.evidence,
        tasks_old.verifications,
    ) != (
        tasks_new.goal,
        tasks_new.requirements,
        tasks_new.decisions,
        tasks_new.evidence,
        tasks_new.verifications,
    ):
        return None
    out: list[object] = []
    context = _context_events(old, new)
    if context is None:
        return None
    out.extend(context)
    summary_after = old.summary
    for event in context:
        if isinstance(event, ev.ContextCleared):
            summary_after = None
        elif isinstance(event, ev.ContextCompacted):
            summary_after = event.summary
    if new.summary != summary_after:
        out.append(ev.SummarySet(new.summary))
    perms = _permission_events(old, new)
    if perms is None:
        return None
    out.extend(perms)
    plan_old, plan_new = old.plan_mode_context, new.plan_mode_context
    if plan_new != plan_old:
        if plan_new.active:
            out.append(ev.PlanModeEntered(plan_new.plan_file))
        elif plan_new.plan_file is None:
            out.append(ev.PlanModeExited())
        else:
            return None
    if (tasks_new.todos, tasks_new.revision) != (tasks_old.todos, tasks_old.revision):
        out.append(ev.TodosWritten(list(tasks_new.todos), tasks_new.revision))
    groups = _group_events(
        old.tool_context.active_groups, new.tool_context.active_groups
    )
    if groups is None:
        return None
    out.extend(groups)
    return out


def _context_events(old: AgentState, new: AgentState) -> list[object] | None:
    before, after = old.context, new.context
    n = len(before)
    if len(after) >= n and after[:n] == before:
        return [ev.MessageAppended(m) for m in after[n:]]
    # Compaction: the new context is the old one with some messages removed.
    kept = {m.id for m in after}
    if new.summary is not None and [m for m in before if m.id in kept] == after:
        removed = [m.id for m in before if m.id not in kept]
        return [ev.ContextCompacted(new.summary, removed)]
    if not after:
        return [ev.ContextCleared("state update")]
    return None


def _permission_events(old: AgentState, new: AgentState) -> list[object] | None:
    out: list[object] = []
    p_old, p_new = old.permission_context, new.permission_context
    if p_new.mode != p_old.mode:
        out.append(ev.PermissionModeSet(p_new.mode))
    for tool, decision in p_new.rules.items():
        if p_old.rules.get(tool) != decision:
            if decision not in _DECISIONS:
                return None
            out.append(ev.PermissionRuleSet(tool, decision))  # type: ignore[arg-type]
    out.extend(ev.PermissionRuleRemoved(t) for t in p_old.rules if t not in p_new.rules)
    return out


def _group_events(before: list[str], after: list[str]) -> list[object] | None:
    expected = list(before)
    out: list[object] = []
    for group in before:
        if group not in after:
            out.append(ev.ToolGroupDeactivated(group))
            expected.remove(group)
    for group in after:
        if group not in expected:
            out.append(ev.ToolGroupActivated(group))
            expected.append(group)
    return out if expected == after else None
