"""What each command found or did: plain data, one report type per command.

Reports hold values only (keys, records, states, counts); they know nothing of
argparse, terminals or JSON. :mod:`journal.cli.render_text` and
:mod:`journal.cli.render_json` turn them into output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from journal import events as ev
    from journal.codec import Record
    from journal.engine import VerifyReport
    from journal.keys import ThreadKey
    from journal.seals import Seal
    from projections.agent_state import AgentState
    from projections.audit import RunEntry, ToolCallEntry

__all__ = [
    "CheckpointReport",
    "DemoReport",
    "DiffReport",
    "ExportReport",
    "FieldChange",
    "ImportReport",
    "LogReport",
    "LsReport",
    "RecoverReport",
    "Report",
    "SealReport",
    "StateReport",
    "ThreadSummary",
    "UncertainCall",
    "VerifyThreadsReport",
]


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One thread as ``ls`` shows it.

    ``last_activity`` is the head record's commit time (0.0 when unknown);
    ``error`` says why the thread could not be read, if so.
    """

    key: ThreadKey
    head: int = 0
    records: int = 0
    last_activity: float = 0.0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class LsReport:
    """``ls``: the threads found under ``root``, in a stable order."""

    root: str
    threads: list[ThreadSummary]


@dataclass(frozen=True, slots=True)
class LogReport:
    """``log``: the records of a thread in the range asked for."""

    key: ThreadKey
    head: int
    records: list[Record]


@dataclass(frozen=True, slots=True)
class StateReport:
    """``state``: the thread's state as of ``version``."""

    key: ThreadKey
    head: int
    version: int
    state: AgentState


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One changed state field, by dotted path (``permission_context.rules.bash``).

    ``old`` is None when the field was ``added``, ``new`` when it was ``removed``.
    """

    field: str
    kind: Literal["added", "removed", "changed"]
    old: object = None
    new: object = None


@dataclass(frozen=True, slots=True)
class DiffReport:
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


@dataclass(frozen=True, slots=True)
class VerifyThreadsReport:
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


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """``checkpoint``: the version the checkpoint was written at."""

    key: ThreadKey
    version: int


@dataclass(frozen=True, slots=True)
class ExportReport:
    """``export``: how many records went out, and to which file (None: a stream)."""

    key: ThreadKey
    count: int
    output: str | None = None


@dataclass(frozen=True, slots=True)
class UncertainCall:
    """A tool call whose outcome is unknown, with the run it belongs to."""

    run_id: str
    call: ToolCallEntry


@dataclass(frozen=True, slots=True)
class RecoverReport:
    """``recover``: the lease taken, and what needs an operator's attention.

    ``interrupted_now`` are the runs this recovery marked interrupted; ``runs``
    those worth a look (interrupted now, still open, or with uncertain calls);
    ``uncertain`` the tool calls whose outcome is unknown.
    """

    key: ThreadKey
    previous_head: int
    fence_version: int
    epoch: int
    interrupted_now: list[str] = field(default_factory=list)
    runs: list[RunEntry] = field(default_factory=list)
    uncertain: list[UncertainCall] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ImportReport:
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
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DemoReport:
    """``demo``: the tour's outcome (it narrates as it goes, so no other data).

    ``status`` is 0 when the final verify was clean, else 1.
    """

    status: int


@dataclass(frozen=True, slots=True)
class SealReport:
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
    | ExportReport
    | RecoverReport
    | ImportReport
    | DemoReport
)
"""Any command's report."""
