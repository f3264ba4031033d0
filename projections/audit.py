"""Audit views: every message ever, the run ledger, and the thread catalog."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec

from journal import events as ev

if TYPE_CHECKING:
    from journal.codec import Record
    from journal.keys import ThreadKey

__all__ = [
    "CatalogEntry",
    "HistoryEntry",
    "HistoryProjection",
    "RunEntry",
    "RunLedger",
    "ThreadCatalog",
    "ToolCallEntry",
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
    """One run: its frame in the log and its tool calls."""

    run_id: str
    started_at: int
    status: RunStatus = "running"
    ended_at: int | None = None
    reason: str = ""
    tool_calls: list[ToolCallEntry] = msgspec.field(default_factory=list)


class RunLedger:
    """Runs and their outcomes; calls with no result are ``unknown`` after a crash.

    The state maps run ids to :class:`RunEntry`; calls outside any run are filed under
    the empty run id. :meth:`finish` marks what a crash left open.
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
                state[run_id] = RunEntry(run_id, record.version)
            case ev.RunCompleted(run_id=run_id):
                self._end(state, run_id, record, "completed", "")
            case ev.RunFailed(run_id=run_id, error=error):
                self._end(state, run_id, record, "failed", error)
            case ev.RunInterrupted(run_id=run_id, reason=reason):
                self._end(state, run_id, record, "interrupted", reason)
            case ev.ToolCallRequested():
                run_id = event.run_id or record.run_id or ""
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
        for entry in state.values():
            for call in entry.tool_calls:
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
    def uncertain(state: dict[str, RunEntry]) -> list[ToolCallEntry]:
        """Tool calls whose outcome is unknown (or still pending)."""
        return [
            call
            for entry in state.values()
            for call in entry.tool_calls
            if call.outcome in ("unknown", "pending")
        ]


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
