"""Turning a state change into the events it amounts to (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING, get_args

import msgspec

from journal import events as ev
from projections.tasks import (
    DecisionDetail,
    EvidenceItem,
    Proposal,
    TasksContext,
    apply_task_event,
)

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
            tool calls, which only the log's own events may change; or it
            rewrites the task's history (see :func:`_task_events`).
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
    # Task history is checked first: no route may rewrite it, not even a whole state.
    tasks = _task_events(old.tasks_context, new.tasks_context)
    if tasks is None or new.shutdown_interrupted != old.shutdown_interrupted:
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
    out.extend(tasks)
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
    # Unchanged, the common case: comparing whole lists slices nothing (equal
    # message objects are the same objects, so this compares pointers).
    if len(after) == n and after == before:
        return []
    if len(after) > n and after[:n] == before:
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


def _copy_tasks(tasks: TasksContext) -> TasksContext:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(tasks), type=TasksContext)


def _check_task_history(old: TasksContext, new: TasksContext) -> None:
    """Refuse a change to the same task that rewrites what the log recorded."""
    n = len(old.verifications)
    if new.verifications[:n] != old.verifications:
        raise ValueError(
            "a state change cannot edit or remove a recorded verification "
            f"(the task has {n}); verifications are only appended"
        )
    if len(new.verifications) > n:
        raise ValueError(
            "a state change cannot add a verification: it comes only from "
            "run_verification, which records what the verifier saw"
        )
    for requirement, texts in old.evidence.items():
        if new.evidence.get(requirement, [])[: len(texts)] != texts:
            raise ValueError(
                f"a state change cannot remove or edit the evidence bound to "
                f"requirement {requirement!r}"
            )
    m = len(old.evidence_items)
    if new.evidence_items[:m] != old.evidence_items:
        raise ValueError(
            "a state change cannot remove or edit bound evidence; bind new "
            "evidence instead"
        )
    if new.revision < old.revision:
        raise ValueError(
            f"the todo revision cannot go back from {old.revision} to {new.revision}"
        )


def _as_recorded(old: TasksContext, new: TasksContext) -> TasksContext:
    """``new`` with what the events of its change would record beside it.

    ``old`` is the task the change builds on (an empty one for a new task). A
    requirement a mutation appended is a proposal; a decision or evidence it wrote
    gets the details the events carry (empty ones when it gave none).
    """
    out = _copy_tasks(new)
    for requirement in out.requirements:
        if requirement not in old.requirements and old.goal is not None:
            out.proposals.setdefault(requirement, Proposal())
    for requirement, decision in out.decisions.items():
        if old.decisions.get(requirement) != decision:
            out.decision_details.setdefault(requirement, DecisionDetail())
    added_items = out.evidence_items[len(old.evidence_items) :]
    for requirement in list(out.evidence):
        texts = out.evidence[requirement]
        added = len(texts) - len(old.evidence.get(requirement, []))
        listed = sum(1 for i in added_items if i.requirement == requirement)
        if added > listed:
            out.evidence_items.extend(
                EvidenceItem(requirement, text)
                for text in texts[len(texts) - added + listed :]
            )
    for item in added_items:
        texts = out.evidence.setdefault(item.requirement, [])
        added = len(texts) - len(old.evidence.get(item.requirement, []))
        listed = sum(1 for i in added_items if i.requirement == item.requirement)
        if added < listed:
            texts.append(item.evidence)
    return out


def _task_events(old: TasksContext, new: TasksContext) -> list[object] | None:
    """The task events that turn ``old`` into ``new``, or None when there are none.

    The candidate events are folded onto ``old`` and kept only when the result is
    ``new`` exactly, so a change is never committed as events that replay to
    another state.

    Raises:
        ValueError: On the same task, ``new`` removes or edits evidence or a
            verification, adds a verification (only ``run_verification`` records
            one), or takes the todo revision back.
    """
    if new == old:
        return []
    same_task = (new.goal, new.task_id) == (old.goal, old.task_id)
    if same_task:
        _check_task_history(old, new)
    elif new.verifications:
        raise ValueError(
            "a state change cannot begin a task with verifications: they come "
            "only from run_verification"
        )
    target = _as_recorded(old if same_task else TasksContext(), new)
    base = _copy_tasks(old)
    out: list[object] = []

    def emit(event: object) -> None:
        apply_task_event(base, event)
        out.append(event)

    if (target.todos, target.revision) != (base.todos, base.revision):
        if target.revision <= base.revision:
            raise ValueError(
                f"a todo list written at revision {target.revision} does not "
                f"follow revision {base.revision}: give it a higher revision"
            )
        emit(ev.TodosWritten(list(target.todos), target.revision))
    if not same_task:
        if target.goal is None:
            return None
        given = [r for r in target.requirements if r not in target.proposals]
        emit(ev.TaskBegun(target.goal, given, target.task_id))
    for requirement in target.requirements:
        if requirement not in base.requirements:
            proposal = target.proposals.get(requirement, Proposal())
            emit(ev.RequirementProposed(requirement, proposal.note, proposal.by))
    for obj, version in target.object_versions.items():
        if base.object_versions.get(obj) != version:
            emit(ev.ObjectVersionSet(obj, version))
    for requirement, decision in target.decisions.items():
        detail = target.decision_details.get(requirement, DecisionDetail())
        if (
            base.decisions.get(requirement),
            base.decision_details.get(requirement),
        ) != (decision, detail):
            emit(ev.RequirementDecided(requirement, decision, detail.note, detail.by))
    for item in target.evidence_items[len(base.evidence_items) :]:
        emit(
            ev.EvidenceBound(
                item.requirement,
                item.evidence,
                item.object_id,
                item.object_version,
                item.by,
            )
        )
    # Anything the events cannot say (a removal, a reorder, a verification of a
    # new task) leaves a difference: the caller then commits the whole state.
    return out if base == target else None
