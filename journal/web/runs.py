"""A thread's records arranged for reading: grouped by run, runs as a tree.

Pure functions over decoded records (no I/O): the run ledger of
:mod:`projections.audit` says what became of each run and tool call; this module
adds where each record belongs and how runs nest (``RunStarted.parent_run_id``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from journal import events as ev
from projections.audit import RunLedger
from projections.base import fold

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from journal.codec import Record
    from projections.audit import RunEntry, ToolCallEntry

__all__ = [
    "CallStatus",
    "RunNode",
    "Segment",
    "ThreadRuns",
    "arrange",
    "call_requests",
    "call_status",
    "calls_before",
    "pruned",
    "record_run",
    "run_tree",
    "segments",
]

CallStatus = Literal["running", "completed", "failed", "uncertain", "reconciled"]
"""What an operator needs to know of a tool call.

``uncertain``: no result was recorded and the run that asked for it ended (or
was left unfinished): the tool may or may not have run, and nothing re-runs it
until someone reconciles it. ``failed``: the tool returned an error result.
"""


def call_status(call: ToolCallEntry, run_status: str) -> CallStatus:
    """The operator's view of a tool call's ledger outcome.

    Args:
        call: The call, from a ledger folded to the head and ``finish``-ed.
        run_status: The ledger status of the run the call belongs to.
    """
    if call.outcome == "ok":
        return "completed"
    if call.outcome == "error":
        return "failed"
    if call.outcome == "reconciled":
        return "reconciled"
    if call.outcome == "pending" and run_status == "running":
        return "running"
    return "uncertain"


@dataclass(slots=True)
class RunNode:
    """One run of the thread, with the runs started under it.

    Attributes:
        entry: The run's ledger entry (status, versions, tool calls).
        turn_id: ``RunStarted.turn_id``, if the runtime recorded one.
        parent_run_id: The run that started this one, if any.
        parent_thread: The thread the parent run lives in, when it is another.
        children: Runs whose parent is this run, in the order they started.
    """

    entry: RunEntry
    turn_id: str | None = None
    parent_run_id: str | None = None
    parent_thread: str | None = None
    children: list[RunNode] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Segment:
    """Consecutive records that belong to one run (``run_id`` None: to none)."""

    run_id: str | None
    records: list[Record]


@dataclass(frozen=True, slots=True)
class ThreadRuns:
    """A thread's runs and records, arranged.

    Attributes:
        roots: Runs with no parent in this thread, in the order they started.
        runs: Every run by id (calls outside a run are under ``""``).
        segments: The records in version order, cut where the run changes.
    """

    roots: list[RunNode]
    runs: dict[str, RunNode]
    segments: list[Segment]


_FRAME = (ev.RunStarted, ev.RunCompleted, ev.RunFailed, ev.RunInterrupted)


def record_run(record: Record, call_runs: dict[str, str]) -> str | None:
    """The run a record belongs to.

    The record's own ``run_id`` first; else a run-frame event's (a recovery's
    fence record carries the ``RunInterrupted`` of the run it ends); else the run
    of the tool call a result or a verdict settles.

    Args:
        record: The record.
        call_runs: Tool call id to run id, for the calls seen so far.
    """
    if record.run_id:
        return record.run_id
    for event in record.events:
        if isinstance(event, _FRAME):
            return event.run_id
        if isinstance(event, ev.ToolCallRequested) and event.run_id:
            return event.run_id
        if isinstance(event, ev.ToolCallCompleted | ev.ToolCallReconciled):
            run_id = call_runs.get(event.call_id)
            if run_id:
                return run_id
    return None


def run_tree(
    records: list[Record], own_names: Collection[str] = ()
) -> tuple[list[RunNode], dict[str, RunNode]]:
    """The runs of ``records`` (a thread's, in version order), nested.

    The ledger is ``finish``-ed: a run still open at the last record counts as
    unfinished, and its calls without a result as uncertain, which is what a
    reader without the lease can honestly say.

    Args:
        records: The thread's records, in version order.
        own_names: Names of this thread a ``parent_thread`` may use; a run whose
            parent lives in another thread is a root here.

    Returns:
        The runs with no parent in this thread, in the order they started, and
        every run by id (calls outside a run are under ``""``).
    """
    ledger: dict[str, RunEntry] = RunLedger.finish(fold(RunLedger(), {}, records))
    nodes = {run_id: RunNode(entry) for run_id, entry in ledger.items()}
    for record in records:
        for event in record.events:
            if isinstance(event, ev.RunStarted) and event.run_id in nodes:
                node = nodes[event.run_id]
                # Read with getattr: older catalogs may not carry these fields.
                node.turn_id = getattr(event, "turn_id", None)
                node.parent_run_id = getattr(event, "parent_run_id", None)
                node.parent_thread = getattr(event, "parent_thread", None)
    roots: list[RunNode] = []
    for node in sorted(nodes.values(), key=lambda n: n.entry.started_at):
        local = not node.parent_thread or node.parent_thread in own_names
        parent = nodes.get(node.parent_run_id or "") if local else None
        # A parent must have started first, so bad links cannot form a cycle.
        if parent is not None and parent.entry.started_at < node.entry.started_at:
            parent.children.append(node)
        else:
            roots.append(node)
    return roots, nodes


def call_requests(records: list[Record]) -> dict[str, list[tuple[int, str]]]:
    """Each tool call id's requests: ``(version, run id)``, in version order."""
    out: dict[str, list[tuple[int, str]]] = {}
    for record in records:
        for event in record.events:
            if isinstance(event, ev.ToolCallRequested):
                run_id = RunLedger.request_run(event, record)
                out.setdefault(event.call_id, []).append((record.version, run_id))
    return out


def calls_before(
    requests: Mapping[str, list[tuple[int, str]]], version: int
) -> dict[str, str]:
    """Tool call id to run id, as the records before ``version`` left it.

    Args:
        requests: What :func:`call_requests` gives.
        version: The first version not counted.
    """
    out: dict[str, str] = {}
    for call_id, asked in requests.items():
        run_id = None
        for at, run in asked:
            if at >= version:
                break
            run_id = run
        if run_id is not None:
            out[call_id] = run_id
    return out


def segments(
    records: list[Record],
    window: range | None = None,
    known: Mapping[str, str] | None = None,
) -> list[Segment]:
    """The records of ``window`` (versions; all when None), cut where the run changes.

    Every record is looked at, so that a result settling a call requested before
    the window still goes with the call's run; ``known`` holds the calls requested
    before the first of ``records`` (see :func:`calls_before`), when ``records`` are
    not all of the thread's.
    """
    call_runs: dict[str, str] = dict(known or {})
    out: list[Segment] = []
    for record in records:
        for event in record.events:
            if isinstance(event, ev.ToolCallRequested):
                call_runs[event.call_id] = RunLedger.request_run(event, record)
        if window is not None and record.version not in window:
            continue
        run_id = record_run(record, call_runs) or None
        if out and out[-1].run_id == run_id:
            out[-1].records.append(record)
        else:
            out.append(Segment(run_id, [record]))
    return out


def pruned(roots: list[RunNode], keep: Collection[str]) -> list[RunNode]:
    """The trees of ``roots`` cut down to the runs in ``keep`` and their ancestors.

    The nodes returned are copies: ``roots`` is left as it was.
    """
    out: list[RunNode] = []
    for node in roots:
        children = pruned(node.children, keep)
        if children or node.entry.run_id in keep:
            out.append(replace(node, children=children))
    return out


def arrange(records: list[Record], own_names: Collection[str] = ()) -> ThreadRuns:
    """Group ``records`` (a thread's, in version order) by run, and nest the runs.

    :func:`run_tree` and :func:`segments` of every record.
    """
    roots, nodes = run_tree(records, own_names)
    return ThreadRuns(roots, nodes, segments(records))
