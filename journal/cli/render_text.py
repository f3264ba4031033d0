"""Reports as text for a terminal: aligned tables and one-line summaries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from journal.cli.describe import (
    compact,
    describe_event,
    event_type_name,
    format_time,
    message_summary,
    shorten,
    thread_label,
    todo_text,
)
from journal.cli.reports import (
    CheckpointReport,
    DemoReport,
    DiffReport,
    ExportReport,
    FieldChange,
    ImportReport,
    LogReport,
    LsReport,
    RecoverReport,
    SealReport,
    StateReport,
    VerifyThreadsReport,
)
from journal.seals import encode_seal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from journal import events as ev
    from journal.cli.reports import Report
    from journal.codec import Record
    from projections.agent_state import AgentState

__all__ = ["format_table", "render_notes", "render_text"]

_LOG_HEADERS = ("VERSION", "EPOCH", "WRITER", "COMMITTED", "RUN", "EVENT", "DETAIL")


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()
) -> str:
    """Align ``rows`` under ``headers``; columns in ``right`` are right-aligned.

    The last column is never padded, so long details do not push lines wider.
    """
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    last = len(headers) - 1

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            if i == last:
                out.append(cell)
            elif i in right:
                out.append(cell.rjust(widths[i]))
            else:
                out.append(cell.ljust(widths[i]))
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def _body(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    indent: str,
    *,
    right: Sequence[int] = (),
) -> list[str]:
    # A table without its header line, indented under a heading of its own.
    lines = format_table(headers, rows, right=right).splitlines()[1:]
    return [indent + line for line in lines]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _text(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in lines)


def render_text(report: Report) -> str:
    """``report`` as the text ``agent-journal`` prints on stdout.

    Returns:
        Whole lines, each ending in a newline; empty for reports whose output
        went elsewhere while the command ran (``export``, ``demo``).
    """
    match report:
        case LsReport():
            return _text(_ls(report))
        case LogReport():
            return _text(_log(report))
        case StateReport():
            return _text(_state(report))
        case DiffReport():
            return _text(_diff(report))
        case VerifyThreadsReport():
            return _text(_verify(report))
        case SealReport():
            if report.seal is None:
                return _text([f"{thread_label(report.key)}: no seal"])
            return _text([encode_seal(report.seal).decode()])
        case CheckpointReport():
            label = thread_label(report.key)
            return _text([f"{label}: checkpoint written at version {report.version}"])
        case RecoverReport():
            return _text(_recover(report))
        case ImportReport():
            return _text(_import(report))
        case ExportReport() | DemoReport():
            return ""


def render_notes(report: Report) -> str:
    """What ``agent-journal`` prints on stderr about ``report`` (often nothing).

    Returns:
        Whole lines, each ending in a newline, or an empty string.
    """
    if isinstance(report, ExportReport) and report.output is not None:
        return _text(
            [
                f"exported {report.count} records of {thread_label(report.key)} "
                f"to {report.output}"
            ]
        )
    return ""


# --- ls ---------------------------------------------------------------------------


def _ls(report: LsReport) -> list[str]:
    if not report.threads:
        return [f"no threads under {report.root}"]
    rows = [
        [
            thread_label(t.key),
            str(t.head),
            str(t.records),
            f"unreadable: {shorten(t.error, 60)}"
            if t.error
            else format_time(t.last_activity),
        ]
        for t in report.threads
    ]
    headers = ("THREAD", "HEAD", "RECORDS", "LAST ACTIVITY")
    return [
        format_table(headers, rows, right=(1, 2)),
        _plural(len(report.threads), "thread"),
    ]


# --- log --------------------------------------------------------------------------


def _log_rows(records: Sequence[Record]) -> list[list[str]]:
    rows: list[list[str]] = []
    for record in records:
        head = [
            str(record.version),
            str(record.epoch),
            record.writer,
            format_time(record.committed_at),
            record.run_id or "-",
        ]
        for i, event in enumerate(record.events or [None]):
            cells = head if i == 0 else ["", "", "", "", ""]
            if event is None:
                rows.append([*cells, "(no events)", ""])
            else:
                rows.append(
                    [*cells, event_type_name(event), shorten(describe_event(event))]
                )
    return rows


def _log_table(records: Sequence[Record]) -> str:
    return format_table(_LOG_HEADERS, _log_rows(records), right=(0, 1))


def _log(report: LogReport) -> list[str]:
    lines = [f"{thread_label(report.key)}  head {report.head}"]
    if report.records:
        lines.append(_log_table(report.records))
    else:
        lines.append("(no records in that range)")
    return lines


# --- state ------------------------------------------------------------------------


def _state_lines(state: AgentState) -> list[str]:
    rows: list[list[str]] = []
    perms = state.permission_context
    rules = ", ".join(f"{t}={d}" for t, d in perms.rules.items()) or "no rules"
    plan = state.plan_mode_context
    tasks = state.tasks_context
    tools = state.tool_context
    rows.append(["summary", shorten(state.summary) if state.summary else "-"])
    rows.append(["permissions", f"mode {perms.mode}; {rules}"])
    rows.append(
        [
            "plan mode",
            f"on ({plan.plan_file or 'no plan file'})" if plan.active else "off",
        ]
    )
    todos = "; ".join(todo_text(t) for t in tasks.todos)
    rows.append(
        ["todos", f"revision {tasks.revision}: {shorten(todos)}" if todos else "-"]
    )
    if tasks.goal is not None:
        done = sum(1 for r in tasks.requirements if r in tasks.decisions)
        rows.append(
            [
                "task",
                f"{shorten(tasks.goal, 60)} ({done}/{len(tasks.requirements)} "
                f"requirements decided, {len(tasks.verifications)} verifications)",
            ]
        )
    rows.append(["tool groups", ", ".join(tools.active_groups) or "-"])
    pending = [
        f"{p.name} call {p.call_id} (v{p.version})"
        for p in tools.pending_calls.values()
    ]
    rows.append(["pending calls", "; ".join(pending) or "-"])
    rows.append(["active run", state.active_run_id or "-"])
    rows.append(["interrupted", "yes" if state.shutdown_interrupted else "no"])
    width = max(len(r[0]) for r in rows)
    return [f"{name.ljust(width)}  {value}" for name, value in rows]


def _message_rows(messages: Sequence[ev.Msg]) -> list[list[str]]:
    return [
        [str(i), m.role, shorten(message_summary(m))] for i, m in enumerate(messages, 1)
    ]


def _state(report: StateReport) -> list[str]:
    state = report.state
    when = "head" if report.version == report.head else f"head {report.head}"
    lines = [
        f"{thread_label(report.key)}  version {report.version} ({when})",
        f"messages ({len(state.context)})",
    ]
    if state.context:
        lines += _body(
            ("#", "ROLE", "CONTENT"), _message_rows(state.context), "  ", right=(0,)
        )
    return lines + _state_lines(state)


# --- diff -------------------------------------------------------------------------


def _old_value(change: FieldChange) -> str:
    if change.kind == "added":
        return "(absent)"
    return shorten(compact(change.old), 50)


def _new_value(change: FieldChange) -> str:
    if change.kind == "removed":
        return "(absent)"
    return shorten(compact(change.new), 50)


def _diff(report: DiffReport) -> list[str]:
    start, stop = report.start, report.stop
    changes, added, removed = report.changes, report.added, report.removed
    lines = [f"{thread_label(report.key)}  version {start} -> {stop}"]
    if not (changes or added or removed):
        lines.append("state: no changes")
    else:
        lines.append("state changes:")
        rows = [[c.field, _old_value(c), "->", _new_value(c)] for c in changes]
        if rows:
            lines += _body(("FIELD", "OLD", "", "NEW"), rows, "  ")
        if added or removed:
            lines.append(f"  context: +{len(added)} / -{len(removed)} messages")
            rows = [["+", m.role, shorten(message_summary(m))] for m in added]
            rows += [["-", m.role, shorten(message_summary(m))] for m in removed]
            lines += _body(("", "ROLE", "CONTENT"), rows, "    ")
    if report.records:
        lines.append(f"records {start + 1}..{stop}:")
        lines.append(_log_table(report.records))
    return lines


# --- verify -----------------------------------------------------------------------


def _verify(report: VerifyThreadsReport) -> list[str]:
    if not report.reports:
        return [f"no threads under {report.root}"]
    lines: list[str] = []
    for one in report.reports:
        status = "ok  " if one.ok else "FAIL"
        extra = "" if one.encryption == "off" else f", encryption {one.encryption}"
        if one.trusted:
            extra += f", sealed to {one.sealed}" if one.sealed else ", not sealed"
        lines.append(
            f"{status}  {thread_label(one.key)}  "
            f"{one.records} records, head {one.head}, "
            f"{one.checkpoints} checkpoints checked, {one.bytes} bytes{extra}"
        )
        lines += [f"      problem: {finding}" for finding in one.problems]
        lines += [f"      warning: {finding}" for finding in one.warnings]
    total, bad = len(report.reports), len(report.with_problems)
    lines.append(
        f"verified {_plural(total, 'thread')}: {total - bad} ok, {bad} with problems"
    )
    return lines


# --- recover ----------------------------------------------------------------------


def _recover(report: RecoverReport) -> list[str]:
    lines = [
        f"{thread_label(report.key)}: lease taken at epoch {report.epoch}; "
        f"fence record at version {report.fence_version} "
        f"(head was {report.previous_head})"
    ]
    if report.interrupted_now:
        lines.append(
            "unfinished run marked interrupted (by recovery): "
            + ", ".join(report.interrupted_now)
        )
    else:
        lines.append("no unfinished run")
    if report.runs:
        lines.append("runs needing attention:")
        rows = [
            [
                r.run_id or "(outside a run)",
                r.status,
                str(r.started_at),
                str(r.ended_at) if r.ended_at is not None else "-",
                r.reason or "-",
            ]
            for r in report.runs
        ]
        table = format_table(("RUN", "STATUS", "STARTED", "ENDED", "REASON"), rows)
        lines += ["  " + line for line in table.splitlines()]
    if report.uncertain:
        lines.append("tool calls with unknown outcome (nothing was re-run):")
        rows = [
            [
                u.call.call_id,
                u.call.name,
                str(u.call.requested_at),
                u.run_id or "-",
                shorten(compact(u.call.input), 50),
            ]
            for u in report.uncertain
        ]
        table = format_table(("CALL", "TOOL", "REQUESTED", "RUN", "INPUT"), rows)
        lines += ["  " + line for line in table.splitlines()]
        lines.append(
            "reconcile each one (ToolCallReconciled, or Agent.reconcile_tool_calls) "
            "once you know what happened"
        )
    else:
        lines.append("no tool calls with unknown outcome")
    return lines


# --- import -----------------------------------------------------------------------


def _import(report: ImportReport) -> list[str]:
    return [
        f"imported slot version {report.slot_version} ({report.messages} messages) "
        f"from {report.source}",
        f"into {thread_label(report.key)} at version {report.version} "
        "(LeaseAcquired + AgentStateReplaced reason=migrated)",
        *(f"note: {note}" for note in report.notes),
    ]
