"""One-line, human-readable descriptions of threads, times, messages and events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from journal import codec
from journal import events as ev
from journal import turn_events as te

if TYPE_CHECKING:
    from journal.keys import ThreadKey

__all__ = [
    "DETAIL_WIDTH",
    "compact",
    "describe_event",
    "event_type_name",
    "format_relative",
    "format_time",
    "label_part",
    "message_summary",
    "shorten",
    "thread_label",
    "todo_text",
]

DETAIL_WIDTH = 90
"""Characters a detail column keeps before it is cut with ``...``."""


def label_part(value: str) -> str:
    """One id as a part of a thread label: ``%``, ``/`` and a bare ``~`` escaped.

    The escapes keep the label unambiguous, so it can be pasted back as a thread
    name (:func:`journal.cli.names.parse_thread_path` reverses them).
    """
    if value == "~":
        return "%7E"
    return value.replace("%", "%25").replace("/", "%2F")


def thread_label(key: ThreadKey) -> str:
    """``namespace/agent/user/session/thread`` (``~`` for the anonymous user).

    Ids holding ``/`` or ``%`` (or a user id that is just ``~``) are
    percent-escaped there, so every label names exactly one thread.
    """
    user = "~" if key.user_id is None else label_part(key.user_id)
    parts = (key.namespace, key.agent_id, key.session_id, key.thread_id)
    ns, agent, session, thread = (label_part(p) for p in parts)
    return f"{ns}/{agent}/{user}/{session}/{thread}"


def format_time(timestamp: float) -> str:
    """A wall-clock time as ``YYYY-MM-DD HH:MM:SSZ`` (UTC)."""
    if timestamp <= 0:
        return "-"
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def shorten(text: str, width: int = DETAIL_WIDTH) -> str:
    """Collapse whitespace and cut ``text`` to ``width`` characters."""
    # Most text is printable with single spaces between words (the only
    # whitespace str.isprintable allows is the space): it collapses to itself,
    # bar a trailing space, so its first width + 2 characters decide the result
    # (cut, they are still longer than width). A state's table shortens each of
    # its messages, tens of thousands of them.
    first = text[: width + 2]
    if width >= 3 and first.isprintable() and "  " not in first and first[:1] != " ":
        flat = first.removesuffix(" ")
    else:
        # Collapsing a prefix gives a prefix of the collapsed whole (bar its
        # last, perhaps cut, word): when that is already too long, the rest of
        # a long message need not be split at all.
        head = " ".join(text[: 4 * width].split())
        if width >= 3 and len(head) > width:
            return head[: width - 3] + "..."
        flat = head if len(text) <= 4 * width else " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def compact(value: object) -> str:
    """``value`` as compact JSON, or its ``repr`` when it is not JSON-encodable."""
    try:
        return msgspec.json.encode(value).decode("utf-8")
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def event_type_name(event: object) -> str:
    """The event's registered type name (its class name if unregistered)."""
    try:
        return codec.event_type_name(event)
    except TypeError:
        return type(event).__name__


def message_summary(msg: ev.Msg) -> str:
    """One line describing a message's content (text, tool use, tool result)."""
    if isinstance(msg.content, str):
        return msg.content
    parts: list[str] = []
    for block in msg.content:
        if isinstance(block, ev.TextBlock):
            parts.append(block.text)
        elif isinstance(block, ev.ToolUseBlock):
            parts.append(f"[tool_use {block.name} {compact(block.input)}]")
        elif isinstance(block, ev.ToolResultBlock):
            flag = " error" if block.is_error else ""
            output = (
                block.output if isinstance(block.output, str) else compact(block.output)
            )
            parts.append(f"[tool_result{flag} {output}]")
        else:
            parts.append(f"[thinking] {block.text}")
    return " ".join(parts)


def todo_text(todo: object) -> str:
    """A todo item as ``[status] content`` (or its content, or compact JSON)."""
    if isinstance(todo, dict) and "content" in todo:
        status = todo.get("status")
        return f"[{status}] {todo['content']}" if status else str(todo["content"])
    return todo if isinstance(todo, str) else compact(todo)


def _by(who: str) -> str:
    return f" by {who}" if who else ""


def describe_event(event: object) -> str:
    """One readable line of what an event says (without its type name)."""
    match event:
        case ev.ThreadCreated():
            user = "~" if event.user_id is None else event.user_id
            return (
                f"{event.namespace}/{event.agent_id}/{user}/"
                f"{event.session_id}/{event.thread_id}"
            )
        case ev.LeaseAcquired(epoch=epoch, holder=holder):
            return f"epoch {epoch}, holder {holder}"
        case ev.RunStarted(run_id=run_id):
            extra = f" (turn {event.turn_id})" if event.turn_id else ""
            if event.parent_run_id:
                extra += f" (parent {event.parent_run_id})"
            return f"run {run_id}{extra}"
        case ev.RunCompleted(run_id=run_id):
            return f"run {run_id}"
        case ev.RunFailed(run_id=run_id, error=error):
            return f"run {run_id}: {error}" if error else f"run {run_id}"
        case ev.RunInterrupted(run_id=run_id, reason=reason, by=by):
            return f"run {run_id} by {by}" + (f" ({reason})" if reason else "")
        case ev.MessageAppended(message=msg):
            return f"{msg.role}: {message_summary(msg)}"
        case ev.ContextCompacted(summary=summary, replaced_ids=ids):
            return f"{len(ids)} messages -> summary: {summary}"
        case ev.SummarySet(summary=summary):
            return "cleared" if summary is None else summary
        case ev.ContextCleared(reason=reason):
            return reason
        case ev.ToolCallRequested(call_id=call_id, name=name):
            return f"call {call_id}: {name}({compact(event.input)})"
        case ev.ToolCallCompleted(call_id=call_id, output=output):
            flag = "error " if event.is_error else ""
            return f"call {call_id}: {flag}{compact(output)}"
        case ev.ToolCallReconciled(call_id=call_id, resolution=resolution):
            note = f" ({event.note})" if event.note else ""
            return f"call {call_id}: {compact(resolution)}{note}"
        case ev.ToolGroupActivated(group=group) | ev.ToolGroupDeactivated(group=group):
            return group
        case ev.PermissionRuleSet(tool=tool, decision=decision):
            return f"{tool} = {decision}"
        case ev.PermissionRuleRemoved(tool=tool):
            return tool
        case ev.PermissionModeSet(mode=mode):
            return mode
        case ev.PlanModeEntered(plan_file=plan_file):
            return plan_file or ""
        case ev.TodosWritten(todos=todos, revision=revision):
            return f"revision {revision}{_by(event.by)}: " + "; ".join(
                todo_text(t) for t in todos
            )
        case ev.TaskBegun(goal=goal, requirements=requirements):
            task = f"task {event.task_id}: " if event.task_id else ""
            return f"{task}{goal} ({len(requirements)} requirements)" + (
                ": " + "; ".join(requirements) if requirements else ""
            )
        case ev.RequirementProposed(requirement=req, note=note, by=by):
            return f"{req}" + _by(by) + (f" ({note})" if note else "")
        case ev.RequirementDecided(requirement=req, decision=decision):
            note = f" ({event.note})" if event.note else ""
            return f"{req}: {decision}{_by(event.by)}{note}"
        case ev.EvidenceBound(requirement=req, evidence=evidence):
            seen = (
                f" [{event.object_id} @ {event.object_version}]"
                if event.object_id is not None
                else ""
            )
            return f"{req}: {evidence}{seen}{_by(event.by)}"
        case ev.ObjectVersionSet(object_id=object_id, version=version):
            return f"{object_id} @ {version}"
        case ev.VerificationRecorded(passed=passed, detail=detail):
            text = ("passed" if passed else "failed") + _by(event.verifier)
            if event.checks:
                ok = sum(1 for c in event.checks if c.passed)
                text += f", {ok}/{len(event.checks)} checks passed"
            if event.evidence_versions:
                text += ", saw " + ", ".join(
                    f"{k} @ {v}" for k, v in event.evidence_versions.items()
                )
            return text + (f": {detail}" if detail else "")
        case ev.AgentStateReplaced(reason=reason, messages=messages):
            return f"reason {reason}, {len(messages)} messages"
        case te.TurnQueued(turn_id=turn_id, inputs=inputs):
            return f"turn {turn_id}: queued, {inputs} input messages"
        case te.TurnStarted(turn_id=turn_id, run_id=run_id, attempt=attempt):
            return f"turn {turn_id}: run {run_id} (attempt {attempt}) by {event.worker}"
        case te.TurnTakenOver(turn_id=turn_id, run_id=run_id, decision=decision):
            calls = (
                f", uncertain {', '.join(event.uncertain)}" if event.uncertain else ""
            )
            by = f" taken over by {event.worker}"
            return f"turn {turn_id}: run {run_id}{by}{calls}: {decision}"
        case te.TurnPaused(turn_id=turn_id) | te.TurnCancelled(turn_id=turn_id):
            at = f" at run {event.run_id}" if event.run_id else ""
            return f"turn {turn_id}{at}" + (f": {event.reason}" if event.reason else "")
        case te.TurnResumed(turn_id=turn_id, revision=revision):
            return f"turn {turn_id} from revision {revision}"
        case te.TurnFailed(turn_id=turn_id, error=error):
            return f"turn {turn_id}: {error}"
        case te.TurnControlRefused(turn_id=turn_id, op=op, reason=reason):
            return f"turn {turn_id}: {op} refused: {reason}"
        case ev.UnknownEvent():
            kind = "required" if event.required else "optional"
            return (
                f"unknown {kind} event (schema {event.schema}, "
                f"{len(event.data)} bytes kept as written)"
            )
        case msgspec.Struct():
            fields = msgspec.structs.asdict(event)
            return ", ".join(f"{k}={compact(v)}" for k, v in fields.items())
        case _:
            return repr(event)


def format_relative(timestamp: float, now: float) -> str:
    """How far ``timestamp`` is from ``now``: ``in 25 s``, ``3 min ago``, ..."""
    delta = timestamp - now
    seconds = abs(delta)
    if seconds < 1:
        return "now"
    if seconds < 120:
        amount = f"{seconds:.0f} s"
    elif seconds < 7200:
        amount = f"{seconds / 60:.0f} min"
    elif seconds < 172800:
        amount = f"{seconds / 3600:.0f} h"
    else:
        amount = f"{seconds / 86400:.0f} days"
    return f"in {amount}" if delta > 0 else f"{amount} ago"
