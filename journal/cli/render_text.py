"""Reports as text for a terminal: aligned tables and one-line summaries.

Without a width (output that is not a terminal: a pipe, a file, a test's
capture) tables take their natural width and no colour, so the text is plain and
stable for scripts; that text is laid out here, without a rendering library.
Given a terminal's width tables fit it (the widest column folds), and with
``color`` statuses are coloured: that is ``rich``'s job
(:mod:`~journal.cli.render_rich`), imported only then, as it is for the rare
plain output with a control character in it.
"""

from __future__ import annotations

import re
import time
from itertools import chain
from typing import TYPE_CHECKING, cast

from journal.cli.blocks import Grid, Styled
from journal.cli.describe import (
    compact,
    describe_event,
    event_type_name,
    format_relative,
    format_time,
    message_summary,
    shorten,
    thread_label,
    todo_text,
)
from journal.cli.notes import render_notes
from journal.cli.reports import (
    CheckpointReport,
    DemoReport,
    DiffReport,
    ExportReport,
    FieldChange,
    HistoryReport,
    ImportExportReport,
    ImportReport,
    IndexReport,
    LeaseView,
    LogReport,
    LsReport,
    ReconcileReport,
    RecoverReport,
    RunsReport,
    SealReport,
    StateReport,
    VerifyThreadsReport,
    call_status,
)
from journal.seals import encode_seal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from journal import events as ev
    from journal.cli.blocks import Block, Cell
    from journal.cli.reports import Report
    from journal.codec import Record
    from projections.agent_state import AgentState

__all__ = [
    "STYLES",
    "emit",
    "emit_plain",
    "format_table",
    "needs_rich",
    "render_notes",
    "render_text",
    "report_blocks",
]

STYLES = {
    "ok": "green",
    "FAIL": "bold red",
    "problem": "red",
    "warning": "yellow",
    "completed": "green",
    "failed": "red",
    "uncertain": "bold yellow",
    "reconciled": "cyan",
    "running": "blue",
    "interrupted": "yellow",
    "unfinished": "bold yellow",
    "attention": "bold yellow",
    "cleared": "dim",
    "compacted": "dim",
}
"""Rich styles of the words the tables colour (on a terminal only)."""


def _styled(word: str) -> Styled:
    return Styled.of(word, STYLES.get(word.split()[0] if word else "", ""))


# Text that rich treats specially (control codes it strips, tabs it expands,
# line breaks inside a cell): output holding any goes to rich, so plain text is
# always what rich itself would print at the natural width.
_SPECIAL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_SPECIAL_CELL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Styled) else cell


def _plain_rows(rows: list[list[Cell]]) -> list[list[str]]:
    """The rows with each cell's text: the rows themselves when every cell is text.

    A long thread's state is a grid of tens of thousands of plain cells: asking
    each in Python whether it is styled took about a third of laying it out.
    Their types are collected in C instead.
    """
    if set(map(type, chain.from_iterable(rows))) <= {str}:
        return cast("list[list[str]]", rows)
    return [[_plain(c) for c in row] for row in rows]


def needs_rich(blocks: Sequence[Block]) -> bool:
    """Whether ``blocks`` hold text only rich prints faithfully.

    That is a control character (rich strips some, expands tabs) or a line break
    inside a table cell; :func:`emit_plain` handles everything else.
    """
    cells: list[str] = []
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Grid):
            cells += block.headers
            cells += chain.from_iterable(_plain_rows(block.rows))
        else:
            lines.append(_plain(block))
    # One scan of the joined text: a long thread's state has tens of thousands
    # of cells, and joining creates no character that was not there. Every
    # special character is unprintable, so text that str.isprintable passes (in
    # one pass in C) holds none; other text is searched.
    joined = "".join(cells)
    if not joined.isprintable() and _SPECIAL_CELL.search(joined):
        return True
    return bool(_SPECIAL.search("".join(lines)))


def _cell_width(text: str) -> int:
    # Wide and zero-width characters: measured as rich measures them, so a
    # table lines up the same whether rich lays it out or not.
    from rich.cells import cell_len

    return cell_len(text)


def _pad_column(cells: Sequence[str], right: bool) -> list[str]:
    if all(cell.isascii() for cell in cells):
        width = max(map(len, cells), default=0)
        return [cell.rjust(width) if right else cell.ljust(width) for cell in cells]
    widths = [_cell_width(cell) for cell in cells]
    width = max(widths, default=0)
    return [
        " " * (width - w) + cell if right else cell + " " * (width - w)
        for cell, w in zip(cells, widths, strict=True)
    ]


def _grid_lines(grid: Grid) -> list[str]:
    """The grid's lines; a left-aligned last column is not padded.

    The caller strips each line's trailing spaces, which is all that padding
    the last column would add.
    """
    rows = _plain_rows(grid.rows)
    if grid.show_header:
        rows = [list(grid.headers), *rows]
    if not rows:
        return []
    count = len(rows[0])
    if any(len(row) != count for row in rows):
        raise ValueError(f"a grid row does not have {count} cells")
    last = count - 1
    columns: list[list[str]] = []
    for i in range(count):
        # By index, not zip(*rows): that takes an argument per row.
        cells = [row[i] for row in rows]
        padded = i != last or i in grid.right
        columns.append(_pad_column(cells, i in grid.right) if padded else cells)
    indent = " " * grid.indent
    return [indent + "  ".join(cells) for cells in zip(*columns, strict=True)]


def emit(blocks: Sequence[Block], width: int | None = None, color: bool = False) -> str:
    """``blocks`` as text: plain unless a terminal's width or colour asks for rich.

    Args:
        blocks: What to print, in order.
        width: The terminal's width to fit tables to; None: natural widths.
        color: Colour statuses and headers.

    Returns:
        Whole lines without trailing spaces, each ending in a newline.
    """
    if width is not None or color or needs_rich(blocks):
        from journal.cli.render_rich import emit_rich

        return emit_rich(blocks, width, color)
    return emit_plain(blocks)


def emit_plain(blocks: Sequence[Block]) -> str:
    """``blocks`` at their natural width, uncoloured, laid out without rich.

    The text is what rich prints for the same blocks (columns two spaces
    apart, wide characters measured as rich measures them, trailing spaces
    stripped) as long as :func:`needs_rich` is false for them.

    Returns:
        Whole lines, each ending in a newline; empty for no blocks.
    """
    if not blocks:
        return ""
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Grid):
            lines += _grid_lines(block)
        else:
            lines.append(_plain(block))
    stripped = [line.rstrip() for line in "\n".join(lines).splitlines()]
    return "\n".join(stripped) + "\n" if stripped else ""


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


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def render_text(
    report: Report, *, width: int | None = None, color: bool = False
) -> str:
    """``report`` as the text ``agent-journal`` prints on stdout.

    Args:
        report: A command's report.
        width: The terminal's width to fit tables to; None (not a terminal):
            natural widths, plain text.
        color: Colour statuses and headers (only ever on a terminal).

    Returns:
        Whole lines, each ending in a newline; empty for reports whose output
        went elsewhere while the command ran (``export``, ``demo``).
    """
    return emit(report_blocks(report), width, color)


def report_blocks(report: Report) -> list[Block]:
    """``report`` laid out as lines and tables, before any is printed."""
    match report:
        case LsReport():
            return _ls(report)
        case LogReport():
            return _log(report)
        case StateReport():
            return _state(report)
        case DiffReport():
            return _diff(report)
        case VerifyThreadsReport():
            return _verify(report)
        case SealReport():
            if report.seal is None:
                return [f"{thread_label(report.key)}: no seal"]
            return [encode_seal(report.seal).decode()]
        case CheckpointReport():
            label = thread_label(report.key)
            return [f"{label}: checkpoint written at version {report.version}"]
        case IndexReport():
            threads = "thread" if report.threads == 1 else "threads"
            return [
                f"thread index complete: {report.threads} {threads}, "
                f"{report.added} added by this run"
            ]
        case RecoverReport():
            return _recover(report)
        case ImportReport():
            return _import(report)
        case RunsReport():
            return _runs(report)
        case HistoryReport():
            return _history(report)
        case ReconcileReport():
            return _reconcile(report)
        case ImportExportReport():
            return [
                f"imported {_plural(report.records, 'record')} "
                f"({_plural(report.events, 'event')}) from {report.path}",
                f"into {thread_label(report.key)}: head {report.version}, "
                f"epoch {report.epoch}",
            ]
        case ExportReport() | DemoReport():
            return []


# --- ls ---------------------------------------------------------------------------


def _ls(report: LsReport) -> list[Block]:
    if not report.threads:
        if report.attention_only:
            return [f"no threads need attention under {report.root}"]
        return [f"no threads under {report.root}"]
    rows: list[list[Cell]] = [
        [
            thread_label(t.key),
            str(t.head),
            str(t.records),
            f"unreadable: {shorten(t.error, 60)}"
            if t.error
            else format_time(t.last_activity),
            Styled.of("; ".join(t.attention), style=STYLES["attention"])
            if t.attention
            else "-",
        ]
        for t in report.threads
    ]
    headers = ("THREAD", "HEAD", "RECORDS", "LAST ACTIVITY", "ATTENTION")
    need = sum(1 for t in report.threads if t.attention)
    summary = _plural(len(report.threads), "thread")
    if need:
        summary += f", {need} needing attention"
    return [Grid(headers, rows, right=(1, 2), flex=0), summary]


# --- log --------------------------------------------------------------------------


def _log_rows(records: Sequence[Record]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for record in records:
        run = record.run_id or "-"
        head = [
            str(record.version),
            str(record.epoch),
            record.writer,
            format_time(record.committed_at),
            run,
        ]
        for i, event in enumerate(record.events or [None]):
            # Continuation lines repeat the run, so a grep for it finds them all.
            cells: list[Cell] = list(head) if i == 0 else ["", "", "", "", run]
            if event is None:
                rows.append([*cells, "(no events)", ""])
            else:
                rows.append(
                    [*cells, event_type_name(event), shorten(describe_event(event))]
                )
    return rows


def _log_grid(records: Sequence[Record], *, show_header: bool = True) -> Grid:
    return Grid(_LOG_HEADERS, _log_rows(records), right=(0, 1), show_header=show_header)


def _log(report: LogReport) -> list[Block]:
    if report.continued:
        return [_log_grid(report.records, show_header=False)] if report.records else []
    title = f"{thread_label(report.key)}  head {report.head}"
    if report.run_id is not None:
        title += f"  run {report.run_id}"
    if report.types:
        title += f"  events {', '.join(report.types)}"
    lines: list[Block] = [title]
    if report.records:
        lines.append(_log_grid(report.records))
    elif report.run_id is not None or report.types:
        lines.append("(no records match)")
    else:
        lines.append("(no records in that range)")
    return lines


# --- runs and history -------------------------------------------------------------


def _lease_line(lease: LeaseView | None, now: float) -> str:
    if lease is None:
        return "lease: none"
    if lease.damage is not None:
        return f"lease: damaged ({lease.damage}); it proves no holder"
    if lease.expires_at <= 0 and not lease.live:
        # A closed writer's release (the engine's RELEASED_EXPIRY, not imported:
        # a cold command loads no more than it prints): no time to show.
        holder = f" by {lease.holder}" if lease.holder else ""
        return f"lease: released{holder} (epoch {lease.epoch}); anyone may take it"
    when = f"{format_time(lease.expires_at)} ({format_relative(lease.expires_at, now)})"
    if lease.live:
        return f"lease: held by {lease.holder} (epoch {lease.epoch}) until {when}"
    if lease.idle:
        return (
            f"lease: kept idle by {lease.holder} (epoch {lease.epoch}) until {when}; "
            "no operation runs, anyone may take it"
        )
    holder = f"{lease.holder}, " if lease.holder else ""
    return f"lease: free ({holder}epoch {lease.epoch}, expired {when})"


def _runs(report: RunsReport) -> list[Block]:
    lines: list[Block] = [
        f"{thread_label(report.key)}  head {report.head}  "
        f"{_plural(len(report.runs), 'run')}",
        _lease_line(report.lease, time.time()),
    ]
    if not report.runs:
        return lines
    rows: list[list[Cell]] = []
    for view in report.runs:
        entry = view.entry
        calls = entry.tool_calls
        counts: dict[str, int] = {}
        for call in calls:
            status = call_status(call)
            counts[status] = counts.get(status, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in counts.items()) or "-"
        rows.append(
            [
                entry.run_id or "(outside a run)",
                _styled(entry.status),
                str(entry.started_at),
                str(entry.ended_at) if entry.ended_at is not None else "-",
                view.turn_id or "-",
                view.parent_run_id or "-",
                Styled.of(summary, style=STYLES["uncertain"])
                if "uncertain" in counts
                else summary,
                shorten(entry.reason, 40) if entry.reason else "-",
            ]
        )
    lines.append(
        Grid(
            (
                "RUN",
                "STATUS",
                "STARTED",
                "ENDED",
                "TURN",
                "PARENT",
                "TOOL CALLS",
                "REASON",
            ),
            rows,
            right=(2, 3),
        )
    )
    call_rows: list[list[Cell]] = [
        [
            call.call_id,
            call.name,
            view.run_id or "-",
            str(call.requested_at),
            _styled(call_status(call)),
            str(call.resolved_at) if call.resolved_at is not None else "-",
            shorten(compact(call.input), 40),
            shorten(compact(call.output), 40) if call.output is not None else "-",
        ]
        for view in report.runs
        for call in view.entry.tool_calls
    ]
    if call_rows:
        lines.append("tool calls:")
        lines.append(
            Grid(
                (
                    "CALL",
                    "TOOL",
                    "RUN",
                    "REQUESTED",
                    "STATUS",
                    "RESOLVED",
                    "INPUT",
                    "OUTPUT",
                ),
                call_rows,
                right=(3, 5),
                indent=2,
            )
        )
    parents = {v.run_id: v.parent_thread for v in report.runs if v.parent_thread}
    lines += [f"run {run} was started from thread {t}" for run, t in parents.items()]
    uncertain = [c.call_id for v in report.runs for c in v.uncertain]
    if uncertain:
        lines.append(
            Styled.of(
                f"uncertain: {', '.join(uncertain)}; settle with `reconcile "
                f"{thread_label(report.key)} --call ID=OUTCOME` (or --error ID=MSG)",
                style=STYLES["uncertain"],
            )
        )
    return lines


def _history(report: HistoryReport) -> list[Block]:
    entries = report.entries
    gone = sum(1 for e in entries if e.cleared_at or e.compacted_at)
    lines: list[Block] = [
        f"{thread_label(report.key)}  head {report.head}  "
        f"{_plural(len(entries), 'message')} ever, {gone} no longer in context"
    ]
    if not entries:
        return lines
    rows: list[list[Cell]] = []
    for i, entry in enumerate(entries, 1):
        if entry.compacted_at is not None:
            mark: Cell = _styled(f"compacted {entry.compacted_at}")
        elif entry.cleared_at is not None:
            mark = _styled(f"cleared {entry.cleared_at}")
        else:
            mark = "-"
        rows.append(
            [
                str(i),
                str(entry.version),
                entry.message.role,
                mark,
                shorten(message_summary(entry.message)),
            ]
        )
    lines.append(
        Grid(("#", "VERSION", "ROLE", "LEFT CONTEXT", "CONTENT"), rows, right=(0, 1))
    )
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


def _message_rows(messages: Sequence[ev.Msg]) -> list[list[Cell]]:
    return [
        [str(i), m.role, shorten(message_summary(m))] for i, m in enumerate(messages, 1)
    ]


def _state(report: StateReport) -> list[Block]:
    state = report.state
    when = "head" if report.version == report.head else f"head {report.head}"
    lines: list[Block] = [
        f"{thread_label(report.key)}  version {report.version} ({when})",
        f"messages ({len(state.context)})",
    ]
    if state.context:
        lines.append(
            Grid(
                ("#", "ROLE", "CONTENT"),
                _message_rows(state.context),
                right=(0,),
                indent=2,
                show_header=False,
            )
        )
    return lines + list(_state_lines(state))


# --- diff -------------------------------------------------------------------------


def _old_value(change: FieldChange) -> str:
    if change.kind == "added":
        return "(absent)"
    return shorten(compact(change.old), 50)


def _new_value(change: FieldChange) -> str:
    if change.kind == "removed":
        return "(absent)"
    return shorten(compact(change.new), 50)


def _diff(report: DiffReport) -> list[Block]:
    start, stop = report.start, report.stop
    changes, added, removed = report.changes, report.added, report.removed
    lines: list[Block] = [f"{thread_label(report.key)}  version {start} -> {stop}"]
    if not (changes or added or removed):
        lines.append("state: no changes")
    else:
        lines.append("state changes:")
        rows: list[list[Cell]] = [
            [c.field, _old_value(c), "->", _new_value(c)] for c in changes
        ]
        if rows:
            lines.append(
                Grid(("FIELD", "OLD", "", "NEW"), rows, indent=2, show_header=False)
            )
        if added or removed:
            lines.append(f"  context: +{len(added)} / -{len(removed)} messages")
            msg_rows: list[list[Cell]] = [
                ["+", m.role, shorten(message_summary(m))] for m in added
            ]
            msg_rows += [["-", m.role, shorten(message_summary(m))] for m in removed]
            lines.append(
                Grid(("", "ROLE", "CONTENT"), msg_rows, indent=4, show_header=False)
            )
    if report.records:
        lines.append(f"records {start + 1}..{stop}:")
        lines.append(_log_grid(report.records))
    return lines


# --- verify -----------------------------------------------------------------------


def _verify(report: VerifyThreadsReport) -> list[Block]:
    if not report.reports:
        return [f"no threads under {report.root}"]
    lines: list[Block] = []
    for one in report.reports:
        status = Styled.of("ok  ", style=STYLES["ok"]) if one.ok else _styled("FAIL")
        extra = "" if one.encryption == "off" else f", encryption {one.encryption}"
        if one.trusted:
            extra += f", sealed to {one.sealed}" if one.sealed else ", not sealed"
        line = Styled.assemble(
            status,
            f"  {thread_label(one.key)}  "
            f"{one.records} records, head {one.head}, "
            f"{one.checkpoints} checkpoints checked, {one.bytes} bytes{extra}",
        )
        lines.append(line)
        lines += [
            Styled.of(f"      problem: {finding}", style=STYLES["problem"])
            for finding in one.problems
        ]
        lines += [
            Styled.of(f"      warning: {finding}", style=STYLES["warning"])
            for finding in one.warnings
        ]
    total, bad = len(report.reports), len(report.with_problems)
    lines.append(
        f"verified {_plural(total, 'thread')}: {total - bad} ok, {bad} with problems"
    )
    return lines


# --- recover and reconcile --------------------------------------------------------


def _recover(report: RecoverReport) -> list[Block]:
    label = thread_label(report.key)
    if report.recovered:
        lines: list[Block] = [
            f"{label}: lease taken at epoch {report.epoch}; "
            f"fence record at version {report.fence_version} "
            f"(head was {report.previous_head})"
        ]
    else:
        lines = [
            f"{label}: nothing to recover (head {report.previous_head}); "
            "nothing written",
            _lease_line(report.lease, time.time()),
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
        rows: list[list[Cell]] = [
            [
                r.run_id or "(outside a run)",
                _styled(r.status),
                str(r.started_at),
                str(r.ended_at) if r.ended_at is not None else "-",
                r.reason or "-",
            ]
            for r in report.runs
        ]
        lines.append(
            Grid(("RUN", "STATUS", "STARTED", "ENDED", "REASON"), rows, indent=2)
        )
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
        lines.append(
            Grid(("CALL", "TOOL", "REQUESTED", "RUN", "INPUT"), rows, indent=2)
        )
        example = " ".join(f"--call {u.call.call_id}=OUTCOME" for u in report.uncertain)
        lines.append(
            f"reconcile each one once you know what happened: "
            f"agent-journal reconcile {label} {example} "
            "(or --error ID=MESSAGE)"
        )
    else:
        lines.append("no tool calls with unknown outcome")
    return lines


def _reconcile(report: ReconcileReport) -> list[Block]:
    rows: list[list[Cell]] = [
        [
            c.call_id,
            c.name,
            c.run_id or "-",
            _styled("failed") if c.is_error else _styled("reconciled"),
            shorten(c.outcome, 60),
        ]
        for c in report.calls
    ]
    return [
        f"{thread_label(report.key)}: {_plural(len(report.calls), 'tool call')} "
        f"reconciled at version {report.version} (fence {report.fence_version}); "
        f"reason: {report.reason}",
        Grid(("CALL", "TOOL", "RUN", "VERDICT", "OUTCOME"), rows, indent=2),
        "the thread can run again; the model sees each outcome as a tool result",
    ]


# --- import -----------------------------------------------------------------------


def _import(report: ImportReport) -> list[Block]:
    return [
        f"imported slot version {report.slot_version} ({report.messages} messages) "
        f"from {report.source}",
        f"into {thread_label(report.key)} at version {report.version} "
        "(LeaseAcquired + AgentStateReplaced reason=migrated)",
        *(f"note: {note}" for note in report.notes),
    ]
