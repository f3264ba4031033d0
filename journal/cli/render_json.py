"""Reports as JSON documents (``--json``), and records as JSON-ready builtins."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from journal import events as ev
from journal.cli.describe import event_type_name
from journal.cli.reports import (
    CheckpointReport,
    DemoReport,
    DiffReport,
    ExportReport,
    HistoryReport,
    ImportExportReport,
    ImportReport,
    IndexReport,
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
from journal.keys import key_ids
from projections.agent_state import decode_state

if TYPE_CHECKING:
    from collections.abc import Iterable

    from journal.cli.reports import LeaseView, Report, RunView
    from journal.codec import Record
    from journal.engine import Finding, VerifyReport
    from journal.keys import ThreadKey
    from projections.audit import ToolCallEntry

__all__ = ["event_json", "json_pieces", "record_json", "render_json", "thread_json"]


def thread_json(key: ThreadKey) -> dict[str, Any]:
    """A thread's ids as a JSON object (as a thread's ``IDS`` object holds them)."""
    return dict(key_ids(key))


def event_json(event: object) -> dict[str, Any]:
    """An event as JSON-ready builtins, its ``type`` first.

    An ``AgentStateReplaced``'s msgpack ``state`` is decoded into the state's JSON
    form; an unknown event keeps its bytes (base64) and says ``"unknown": true``.
    """
    if isinstance(event, ev.UnknownEvent):
        return {
            "type": event.type,
            "unknown": True,
            "schema": event.schema,
            "required": event.required,
            "data": msgspec.to_builtins(event.data),
        }
    data = msgspec.to_builtins(event)
    fields: dict[str, Any] = data if isinstance(data, dict) else {"value": data}
    fields.pop("type", None)
    if isinstance(event, ev.AgentStateReplaced):
        fields["state"] = msgspec.to_builtins(decode_state(event.state))
    return {"type": event_type_name(event), **fields}


def record_json(record: Record) -> dict[str, Any]:
    """A record as JSON-ready builtins (what ``export`` writes per line)."""
    return {
        "version": record.version,
        "epoch": record.epoch,
        "writer": record.writer,
        "batch_id": record.batch_id,
        "run_id": record.run_id,
        "committed_at": record.committed_at,
        "prev_hash": record.prev_hash,
        "hash": record.hash,
        "events": [event_json(e) for e in record.events],
    }


def json_pieces(report: Report, *, indent: bool = True) -> Iterable[bytes] | None:
    """:func:`render_json`'s document in pieces (joined, exactly that document).

    A state's compact document comes a few hundred messages at a time
    (:meth:`~projections.agent_state.AgentState.json_pieces`), so that printing
    a long thread overlaps encoding with whoever reads the output; every other
    document is one piece. None for the reports :func:`render_json` has none for.
    """
    if isinstance(report, StateReport) and not indent:
        return report.state.json_pieces()
    document = render_json(report, indent=indent)
    return None if document is None else (document,)


def render_json(report: Report, *, indent: bool = True) -> bytes | None:
    """``report`` as the JSON document ``--json`` prints (no newline).

    Args:
        report: The command's report.
        indent: Two spaces a level, a value a line (what a terminal shows);
            False for the compact document, one line (what a pipe gets: a
            5,000-turn state is 12 MB indented, and indenting it took a third of
            the time of encoding it).

    Returns:
        The document, or None for reports that have none (``export`` streams
        JSON lines as it runs; ``demo`` narrates): print their text instead.
    """
    match report:
        case StateReport():
            # The state's own encoding, so the document is exactly what
            # ``AgentState.from_json`` reads back.
            encoded = report.state.to_json()
        case ExportReport() | DemoReport():
            return None
        case _:
            encoded = msgspec.json.encode(_document(report))
    return msgspec.json.format(encoded, indent=2) if indent else encoded


_Documented = (
    LsReport
    | LogReport
    | DiffReport
    | VerifyThreadsReport
    | CheckpointReport
    | IndexReport
    | RecoverReport
    | ImportReport
    | RunsReport
    | HistoryReport
    | ReconcileReport
    | ImportExportReport
    | SealReport
)


def _document(report: _Documented) -> dict[str, Any]:
    match report:
        case LsReport():
            return {
                "root": report.root,
                "count": len(report.threads),
                "threads": [
                    {
                        **thread_json(t.key),
                        "head": t.head,
                        "records": t.records,
                        "last_activity": t.last_activity or None,
                        "attention": t.attention,
                        **({"error": t.error} if t.error else {}),
                    }
                    for t in report.threads
                ],
            }
        case LogReport():
            return {
                "thread": thread_json(report.key),
                "head": report.head,
                "run_id": report.run_id,
                "types": list(report.types),
                "records": [record_json(r) for r in report.records],
            }
        case RunsReport():
            return {
                "thread": thread_json(report.key),
                "head": report.head,
                "lease": _lease_json(report.lease),
                "runs": [_run_json(v) for v in report.runs],
            }
        case HistoryReport():
            return {
                "thread": thread_json(report.key),
                "head": report.head,
                "messages": [
                    {
                        "version": e.version,
                        "cleared_at": e.cleared_at,
                        "compacted_at": e.compacted_at,
                        "in_context": e.cleared_at is None and e.compacted_at is None,
                        "message": msgspec.to_builtins(e.message),
                    }
                    for e in report.entries
                ],
            }
        case ReconcileReport():
            return {
                "thread": thread_json(report.key),
                "fence_version": report.fence_version,
                "version": report.version,
                "reason": report.reason,
                "calls": [
                    {
                        "call_id": c.call_id,
                        "name": c.name,
                        "run_id": c.run_id or None,
                        "outcome": c.outcome,
                        "is_error": c.is_error,
                    }
                    for c in report.calls
                ],
            }
        case ImportExportReport():
            return {
                "thread": thread_json(report.key),
                "path": report.path,
                "records": report.records,
                "events": report.events,
                "version": report.version,
                "epoch": report.epoch,
            }
        case DiffReport():
            return {
                "thread": thread_json(report.key),
                "from": report.start,
                "to": report.stop,
                "changes": [
                    {"field": c.field, "kind": c.kind, "old": c.old, "new": c.new}
                    for c in report.changes
                ],
                "messages": {"added": report.added, "removed": report.removed},
                "records": [record_json(r) for r in report.records],
            }
        case VerifyThreadsReport():
            return {
                "ok": report.ok,
                "verified": len(report.reports),
                "with_problems": len(report.with_problems),
                "threads": [_verify_json(r) for r in report.reports],
            }
        case CheckpointReport():
            return {"thread": thread_json(report.key), "version": report.version}
        case IndexReport():
            return {"threads": report.threads, "added": report.added}
        case SealReport():
            return {
                "thread": thread_json(report.key),
                "head": report.head,
                "seal": msgspec.to_builtins(report.seal),
            }
        case RecoverReport():
            return {
                "thread": thread_json(report.key),
                "recovered": report.recovered,
                "lease": _lease_json(report.lease),
                "previous_head": report.previous_head,
                "fence_version": report.fence_version,
                "epoch": report.epoch,
                "interrupted_now": report.interrupted_now,
                "runs": [
                    {
                        "run_id": r.run_id or None,
                        "status": r.status,
                        "started_at": r.started_at,
                        "ended_at": r.ended_at,
                        "reason": r.reason,
                        "tool_calls": [_call_json(c, r.run_id) for c in r.tool_calls],
                    }
                    for r in report.runs
                ],
                "uncertain_tool_calls": [
                    _call_json(u.call, u.run_id) for u in report.uncertain
                ],
            }
        case ImportReport():
            return {
                "thread": thread_json(report.key),
                "version": report.version,
                "epoch": report.epoch,
                "source": report.source,
                "slot_version": report.slot_version,
                "messages": report.messages,
                "notes": report.notes,
            }


def _findings(findings: list[Finding]) -> list[dict[str, Any]]:
    return [{"version": f.version, "message": f.message} for f in findings]


def _verify_json(report: VerifyReport) -> dict[str, Any]:
    return {
        **thread_json(report.key),
        "ok": report.ok,
        "head": report.head,
        "records": report.records,
        "checkpoints": report.checkpoints,
        "bytes": report.bytes,
        "encryption": report.encryption,
        "sealed": report.sealed,
        "trusted": report.trusted or None,
        "problems": _findings(report.problems),
        "warnings": _findings(report.warnings),
    }


def _call_json(call: ToolCallEntry, run_id: str) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "name": call.name,
        "input": call.input,
        "run_id": run_id or None,
        "requested_at": call.requested_at,
        "outcome": call.outcome,
        "status": call_status(call),
        "output": call.output,
        "resolved_at": call.resolved_at,
    }


def _lease_json(lease: LeaseView | None) -> dict[str, Any] | None:
    if lease is None:
        return None
    return {
        "holder": lease.holder,
        "epoch": lease.epoch,
        "expires_at": lease.expires_at,
        "live": lease.live,
        "idle": lease.idle,
        "damage": lease.damage,
    }


def _run_json(view: RunView) -> dict[str, Any]:
    entry = view.entry
    return {
        "run_id": entry.run_id or None,
        "status": entry.status,
        "started_at": entry.started_at,
        "ended_at": entry.ended_at,
        "reason": entry.reason,
        "turn_id": view.turn_id,
        "parent_run_id": view.parent_run_id,
        "parent_thread": view.parent_thread,
        "tool_calls": [_call_json(c, entry.run_id) for c in entry.tool_calls],
    }
