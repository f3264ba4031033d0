"""What each command found or did: plain data, one report type per command.

Reports hold values only (keys, records, states, counts); they know nothing of
argparse, terminals or JSON. :mod:`journal.cli.render_text` and
:mod:`journal.cli.render_json` turn them into output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from journal import events as ev
from journal.codec import Record
from journal.keys import ThreadKey
from projections.agent_state import AgentState

if TYPE_CHECKING:
    # Reports are only ever built and encoded, never decoded into, so msgspec
    # never resolves these annotations; importing the verifier, the seal format
    # and the audit projections here cost every cold command about 6 ms.
    from journal.engine import VerifyReport  # noqa: TC004
    from journal.seals import Seal  # noqa: TC004
    from projections.audit import (  # noqa: TC004
        HistoryEntry,
        RunEntry,
        ToolCallEntry,
    )

__all__ = [
    "CALL_STATUSES",
    "CallStatus",
    "CheckpointReport",
    "DemoReport",
    "DiffReport",
    "ExportReport",
    "FieldChange",
    "HistoryReport",
    "ImportExportReport",
    "ImportReport",
    "IndexReport",
    "LeaseView",
    "LogReport",
    "LsReport",
    "ReconcileReport",
    "ReconciledCall",
    "RecoverReport",
    "Report",
    "RunView",
    "RunsReport",
    "SealReport",
    "StateReport",
    "ThreadSummary",
    "UncertainCall",
    "VerifyThreadsReport",
    "call_status",
]

CallStatus = Literal["completed", "failed", "uncertain", "reconciled", "running"]
"""What became of a tool call, as an operator reads it."""

CALL_STATUSES: tuple[CallStatus, ...] = (
    "completed",
    "failed",
    "uncertain",
    "reconciled",
    "running",
)


def call_status(call: ToolCallEntry) -> CallStatus:
    """A ledger call's status: completed (or failed), uncertain, reconciled, running.

    ``pending`` is a call whose run may still be going (the lease is live);
    ``unknown`` one whose run is over without a result: uncertain.
    """
    match call.outcome:
        case "ok":
            return "completed"
        case "error":
            return "failed"
        case "reconciled":
            return "reconciled"
        case "pending":
            return "running"
    return "uncertain"


class LeaseView(msgspec.Struct, frozen=True):
    """A thread's writer lease as read (without taking it).

    ``live``: a holder's unexpired, believable lease (a writer may be running);
    ``damage``: why the ``LEASE`` object cannot be believed, if so; ``idle``: the
    holder keeps it between operations and runs none (anyone may take it: not live).
    """

    holder: str
    epoch: int
    expires_at: float
    live: bool
    damage: str | None = None
    idle: bool = False


class ThreadSummary(msgspec.Struct, frozen=True):
    """One thread as ``ls`` shows it.

    ``last_activity`` is the head record's commit time (0.0 when unknown);
    ``error`` says why the thread could not be read, if so.
    """

    key: ThreadKey
    head: int = 0
    records: int = 0
    last_activity: float = 0.0
    error: str | None = None
    attention: list[str] = msgspec.field(default_factory=list)


class LsReport(msgspec.Struct, frozen=True):
    """``ls``: the threads found under ``root``, in a stable order.

    ``attention_only``: the listing was filtered to threads needing attention.
    """

    root: str
    threads: list[ThreadSummary]
    attention_only: bool = False


class LogReport(msgspec.Struct, frozen=True):
    """``log``: the records of a thread in the range asked for.

    ``records`` are filtered (by run, by event type) as asked: a record keeps
    only its events that matched. ``run_id`` and ``types`` say which filters
    applied; ``continued`` marks a later batch of ``log --follow``.
    """

    key: ThreadKey
    head: int
    records: list[Record]
    run_id: str | None = None
    types: tuple[str, ...] = ()
    continued: bool = False


class RunView(msgspec.Struct, frozen=True):
    """One run of the ledger, with where it sits in the run tree.

    ``turn_id``, ``parent_run_id`` and ``parent_thread`` are None when the run
    did not record them.
    """

    entry: RunEntry
    turn_id: str | None = None
    parent_run_id: str | None = None
    parent_thread: str | None = None

    @property
    def run_id(self) -> str:
        """The run's id ("" for tool calls outside any run)."""
        return self.entry.run_id

    @property
    def uncertain(self) -> list[ToolCallEntry]:
        """The run's calls whose outcome is unknown."""
        return [c for c in self.entry.tool_calls if call_status(c) == "uncertain"]


class RunsReport(msgspec.Struct, frozen=True):
    """``runs``: the run ledger of a thread, oldest run first.

    ``lease`` is the thread's lease as read: while it is live, open runs are
    ``running``; otherwise they are ``unfinished`` and their calls uncertain.
    """

    key: ThreadKey
    head: int
    runs: list[RunView]
    lease: LeaseView | None = None


class HistoryReport(msgspec.Struct, frozen=True):
    """``history``: every message the thread ever held, in order.

    Each entry says the version it entered at and, if it left the context, the
    version that cleared or compacted it.
    """

    key: ThreadKey
    head: int
    entries: list[HistoryEntry]


class StateReport(msgspec.Struct, frozen=True):
    """``state``: the thread's state as of ``version``."""

    key: ThreadKey
    head: int
    version: int
    state: AgentState


class FieldChange(msgspec.Struct, frozen=True):
    """One changed state field, by dotted path (``permission_context.rules.bash``).

    ``old`` is None when the field was ``added``, ``new`` when it was ``removed``.
    """

    field: str
    kind: Literal["added", "removed", "changed"]
    old: object = None
    new: object = None


class DiffReport(msgspec.Struct, frozen=True):
    """``diff``: what changed in the state from ``start`` to ``stop``.

    ``records`` are the records after ``start`` up to ``stop``; ``added`` and
    ``removed`` the context messages that appeared or went.
    """

    key: ThreadKey
    start: int
    stop: int
    changes: list[FieldChange]
    added: list[ev.Msg]
    removed: list[ev.Msg]
    records: list[Record]


class VerifyThreadsReport(msgspec.Struct, frozen=True):
    """``verify``: one engine report per thread checked under ``root``."""

    root: str
    reports: list[VerifyReport]

    @property
    def with_problems(self) -> list[VerifyReport]:
        """The reports that found a problem."""
        return [r for r in self.reports if not r.ok]

    @property
    def ok(self) -> bool:
        """Whether no thread has a problem (also true when none was checked)."""
        return all(r.ok for r in self.reports)


class CheckpointReport(msgspec.Struct, frozen=True):
    """``checkpoint``: the version the checkpoint was written at."""

    key: ThreadKey
    version: int


class IndexReport(msgspec.Struct, frozen=True):
    """``index``: how many threads the index lists, and how many this run added."""

    threads: int
    added: int


class ExportReport(msgspec.Struct, frozen=True):
    """``export``: how many records went out, and to which file (None: a stream)."""

    key: ThreadKey
    count: int
    output: str | None = None


class UncertainCall(msgspec.Struct, frozen=True):
    """A tool call whose outcome is unknown, with the run it belongs to."""

    run_id: str
    call: ToolCallEntry


class RecoverReport(msgspec.Struct, frozen=True):
    """``recover``: what was recovered, and what needs an operator's attention.

    ``recovered`` is False when nothing needed recovery (no unfinished run):
    then nothing was written, ``fence_version`` is 0 and ``epoch`` the lease's
    current one. ``interrupted_now`` are the runs this recovery marked
    interrupted; ``runs`` those worth a look (interrupted now, still open, or
    with uncertain calls); ``uncertain`` the tool calls whose outcome is
    unknown; ``lease`` the lease as read before anything was done.
    """

    key: ThreadKey
    previous_head: int
    fence_version: int
    epoch: int
    interrupted_now: list[str] = msgspec.field(default_factory=list)
    runs: list[RunEntry] = msgspec.field(default_factory=list)
    uncertain: list[UncertainCall] = msgspec.field(default_factory=list)
    recovered: bool = True
    lease: LeaseView | None = None


class ReconciledCall(msgspec.Struct, frozen=True):
    """One verdict ``reconcile`` recorded."""

    call_id: str
    name: str
    run_id: str
    outcome: str
    is_error: bool


class ReconcileReport(msgspec.Struct, frozen=True):
    """``reconcile``: the verdicts committed, in the record at ``version``.

    ``fence_version`` is the lease's fence record, just before it.
    """

    key: ThreadKey
    fence_version: int
    version: int
    reason: str
    calls: list[ReconciledCall]


class ImportReport(msgspec.Struct, frozen=True):
    """``import``: the thread created from a state slot.

    ``source`` describes where the slot came from; ``notes`` what the operator
    should know (an unfinished run, pending tool calls kept as uncertain).
    """

    key: ThreadKey
    version: int
    epoch: int
    source: str
    slot_version: int
    messages: int
    notes: list[str] = msgspec.field(default_factory=list)


class ImportExportReport(msgspec.Struct, frozen=True):
    """``import --from-export``: the thread created from an export file.

    ``records`` were read from ``path`` (the export's versions 1 to ``records``);
    the new thread's head is ``version``.
    """

    key: ThreadKey
    path: str
    records: int
    events: int
    version: int
    epoch: int


class DemoReport(msgspec.Struct, frozen=True):
    """``demo``: the tour's outcome (it narrates as it goes, so no other data).

    ``status`` is 0 when the final verify was clean, else 1.
    """

    status: int


class SealReport(msgspec.Struct, frozen=True):
    """``seal``: the thread's latest seal (None: it has none)."""

    key: ThreadKey
    head: int
    seal: Seal | None


Report = (
    LsReport
    | LogReport
    | StateReport
    | DiffReport
    | VerifyThreadsReport
    | SealReport
    | CheckpointReport
    | IndexReport
    | ExportReport
    | RecoverReport
    | ImportReport
    | DemoReport
    | RunsReport
    | HistoryReport
    | ReconcileReport
    | ImportExportReport
)
"""Any command's report."""
