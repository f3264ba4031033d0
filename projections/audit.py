"""Audit views: every message ever, the run ledger, and the thread catalog."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec

from journal import events as ev

if TYPE_CHECKING:
    from collections.abc import Mapping

    from journal.codec import Record
    from journal.keys import ThreadKey

__all__ = [
    "CatalogEntry",
    "HistoryEntry",
    "HistoryProjection",
    "RunEntry",
    "RunLedger",
    "RunNode",
    "ThreadCatalog",
    "ToolCallEntry",
    "run_tree",
]

ToolOutcome = Literal["pending", "ok", "error", "reconciled", "unknown"]
RunStatus = Literal["running", "completed", "failed", "interrupted", "unfinished"]


class HistoryEntry(msgspec.Struct):
    """A message as it entered the thread, whatever happened to it later."""

    version: int
    message: ev.Msg
    cleared_at: int | None = None
    compacted_at: int | None = None


class HistoryProjection:
    """Every message ever appended, across clears, compactions and replacements."""

    name = "history"

    def initial(self, key: ThreadKey) -> list[HistoryEntry]:
        """An empty history."""
        return []

    def apply(
        self, state: list[HistoryEntry], record: Record, event: object
    ) -> list[HistoryEntry]:
        """Record messages and mark when they left the context."""
        if isinstance(event, ev.MessageAppended):
            state.append(HistoryEntry(record.version, event.message))
        elif isinstance(event, ev.ToolCallCompleted):
            message = event.message()
            if message is not None:
                state.append(HistoryEntry(record.version, message))
        elif isinstance(event, ev.ContextCleared):
            for entry in state:
                if entry.cleared_at is None and entry.compacted_at is None:
                    entry.cleared_at = record.version
        elif isinstance(event, ev.ContextCompacted):
            gone = set(event.replaced_ids)
            for entry in state:
                if entry.message.id in gone and entry.compacted_at is None:
                    entry.compacted_at = record.version
        elif isinstance(event, ev.AgentStateReplaced):
            known = {entry.message.id for entry in state}
            state.extend(
                HistoryEntry(record.version, m)
                for m in event.messages
                if m.id not in known
            )
        return state


class ToolCallEntry(msgspec.Struct):
    """One tool call and what became of it."""

    call_id: str
    name: str
    input: Any
    requested_at: int
    outcome: ToolOutcome = "pending"
    output: Any = None
    resolved_at: int | None = None


class RunEntry(msgspec.Struct):
    """One run: its frame in the log, its tool calls, and where it came from.

    Attributes:
        run_id: The run.
        started_at: The version of its ``RunStarted``.
        status: ``running``, ``completed``, ``failed``, ``interrupted`` (or
            ``unfinished`` after :meth:`RunLedger.finish`).
        ended_at: The version of its end event.
        reason: Why it failed or was interrupted.
        tool_calls: Its tool calls, in order.
        turn_id: The application's turn id, if the caller gave one.
        parent_run_id: The run that started this one (a sub-agent's run).
        parent_thread: The thread of that run (``str`` of its key).
        interrupted_by: Who interrupted it (``user``, ``shutdown``, ``recovery``).
    """

    run_id: str
    started_at: int
    status: RunStatus = "running"
    ended_at: int | None = None
    reason: str = ""
    tool_calls: list[ToolCallEntry] = msgspec.field(default_factory=list)
    turn_id: str | None = None
    parent_run_id: str | None = None
    parent_thread: str | None = None
    interrupted_by: str | None = None


class RunLedger:
    """Runs and their outcomes; calls with no result are ``unknown`` after a crash.

    The state maps run ids to :class:`RunEntry`; calls outside any run are filed under
    the empty run id. :meth:`finish` marks what a crash left open. A result or a
    verdict settles the call its id names in the run seen most recently that asked
    for one: models that number their calls per response use an id again.
    """

    name = "run_ledger"

    def initial(self, key: ThreadKey) -> dict[str, RunEntry]:
        """An empty ledger."""
        return {}

    def apply(
        self, state: dict[str, RunEntry], record: Record, event: object
    ) -> dict[str, RunEntry]:
        """Fold run frames and tool calls."""
        match event:
            case ev.RunStarted(run_id=run_id):
                state[run_id] = RunEntry(
                    run_id,
                    record.version,
                    turn_id=event.turn_id,
                    parent_run_id=event.parent_run_id,
                    parent_thread=event.parent_thread,
                )
            case ev.RunCompleted(run_id=run_id):
                self._end(state, run_id, record, "completed", "")
            case ev.RunFailed(run_id=run_id, error=error):
                self._end(state, run_id, record, "failed", error)
            case ev.RunInterrupted(run_id=run_id, reason=reason):
                self._end(state, run_id, record, "interrupted", reason)
                state[run_id].interrupted_by = event.by
            case ev.ToolCallRequested():
                run_id = self.request_run(event, record)
                entry = state.setdefault(run_id, RunEntry(run_id, record.version))
                entry.tool_calls.append(
                    ToolCallEntry(
                        event.call_id, event.name, event.input, record.version
                    )
                )
            case ev.ToolCallCompleted(call_id=call_id):
                self._resolve(
                    state,
                    call_id,
                    record,
                    "error" if event.is_error else "ok",
                    event.output,
                )
            case ev.ToolCallReconciled(call_id=call_id):
                self._resolve(state, call_id, record, "reconciled", event.resolution)
            case _:
                pass
        return state

    @staticmethod
    def request_run(event: ev.ToolCallRequested, record: Record) -> str:
        """The run a tool call request is filed under.

        The one it names, else its record's, else ``""`` (outside any run).
        """
        return event.run_id or record.run_id or ""

    @staticmethod
    def _end(
        state: dict[str, RunEntry],
        run_id: str,
        record: Record,
        status: RunStatus,
        reason: str,
    ) -> None:
        entry = state.setdefault(run_id, RunEntry(run_id, record.version))
        entry.status, entry.ended_at, entry.reason = status, record.version, reason
        for call in entry.tool_calls:
            if call.outcome == "pending":
                call.outcome = "unknown"

    @staticmethod
    def _resolve(
        state: dict[str, RunEntry],
        call_id: str,
        record: Record,
        outcome: ToolOutcome,
        output: Any,
    ) -> None:
        # From the newest run back: a result nearly always settles a call of the
        # run in progress (a scan from the oldest made a thread's fold quadratic in
        # its runs), and a model that numbers its calls per response reuses ids,
        # whose latest request is the one a result answers (as in the state).
        for entry in reversed(state.values()):
            for call in reversed(entry.tool_calls):
                if call.call_id == call_id:
                    call.outcome, call.output = outcome, output
                    call.resolved_at = record.version
                    return

    @staticmethod
    def finish(state: dict[str, RunEntry]) -> dict[str, RunEntry]:
        """Mark runs still open at the head as ``unfinished`` and their calls unknown.

        Call it on a ledger folded to the head of a thread with no live writer.
        """
        for entry in state.values():
            if entry.status == "running" and entry.run_id:
                entry.status = "unfinished"
                for call in entry.tool_calls:
                    if call.outcome == "pending":
                        call.outcome = "unknown"
        return state

    @staticmethod
    def by_turn(state: dict[str, RunEntry], turn_id: str) -> list[RunEntry]:
        """The runs of one application turn, in the order they started."""
        runs = [e for e in state.values() if e.turn_id == turn_id]
        return sorted(runs, key=lambda e: e.started_at)

    @staticmethod
    def uncertain(state: dict[str, RunEntry]) -> list[ToolCallEntry]:
        """Tool calls whose outcome is unknown (or still pending)."""
        return [
            call
            for entry in state.values()
            for call in entry.tool_calls
            if call.outcome in ("unknown", "pending")
        ]


class RunNode(msgspec.Struct):
    """One run in the run tree: where it ran, what it was, and the runs it started.

    Attributes:
        thread: The thread it ran on (``str`` of its key).
        run: Its ledger entry.
        children: The sub-agents' runs it started, in the order they started.
    """

    thread: str
    run: RunEntry
    children: list[RunNode] = msgspec.field(default_factory=list)


def run_tree(ledgers: Mapping[str, Mapping[str, RunEntry]]) -> list[RunNode]:
    """Link the runs of several threads into trees by their parent runs.

    Args:
        ledgers: Thread name (``str`` of its key) -> that thread's
            :class:`RunLedger` state.

    Returns:
        The root runs (no parent, or a parent not among ``ledgers``), each with
        its descendants; roots and children in the order they started.
    """
    nodes: dict[tuple[str, str], RunNode] = {}
    for thread, ledger in ledgers.items():
        for run_id, entry in ledger.items():
            if run_id:
                nodes[(thread, run_id)] = RunNode(thread, entry)
    roots: list[RunNode] = []
    for node in nodes.values():
        entry = node.run
        parent = None
        if entry.parent_run_id is not None and entry.parent_thread is not None:
            parent = nodes.get((entry.parent_thread, entry.parent_run_id))
        (parent.children if parent is not None else roots).append(node)
    for node in nodes.values():
        node.children.sort(key=lambda n: (n.thread, n.run.started_at))
    roots.sort(key=lambda n: (n.thread, n.run.started_at))
    return roots


class CatalogEntry(msgspec.Struct):
    """One thread in the catalog."""

    key: str
    head: int
    last_activity: float
    records: int = 0


class ThreadCatalog:
    """Threads, their heads and last activity, folded across many threads.

    Unlike the per-thread projections, its state is keyed by thread: feed it records
    with :meth:`observe`.
    """

    name = "thread_catalog"

    def initial(self) -> dict[str, CatalogEntry]:
        """An empty catalog."""
        return {}

    def observe(
        self, state: dict[str, CatalogEntry], key: ThreadKey, record: Record
    ) -> dict[str, CatalogEntry]:
        """Account for one record of thread ``key``."""
        name = str(key)
        entry = state.get(name)
        if entry is None:
            entry = state[name] = CatalogEntry(name, 0, 0.0)
        entry.head = max(entry.head, record.version)
        entry.last_activity = max(entry.last_activity, record.committed_at)
        entry.records += 1
        return state
