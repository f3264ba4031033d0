"""The state of a thread's turns, folded from its log (pure: no I/O).

A turn's status comes from the turn events (``journal.turn_events``) and from the
ends of the runs that execute it (``RunStarted.turn_id`` and ``TurnStarted.run_id``
tie a run to its turn): ``RunCompleted`` completes the turn, ``RunFailed`` fails it.
Each transition raises the turn's revision by one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from journal import events as ev
from journal import turn_events as te

if TYPE_CHECKING:
    from collections.abc import Iterable

    from journal.codec import Record

__all__ = ["TERMINAL", "TurnInfo", "TurnLedger", "TurnStatus"]


class TurnStatus(enum.StrEnum):
    """Where a turn is in its life (see docs/DURABLE.md for the state machine)."""

    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({TurnStatus.COMPLETED, TurnStatus.FAILED, TurnStatus.CANCELLED})
"""The statuses a turn never leaves."""


@dataclass(slots=True)
class TurnInfo:
    """One turn as its thread's log shows it.

    Attributes:
        turn_id: The turn.
        status: Its status.
        revision: Its number of transitions (1 when queued).
        first_version: The log version of its ``TurnQueued`` (0: not in the log).
        last_version: The log version of its latest transition.
        runs: Its runs, in order.
        attempts: How many runs were started for it.
        input_committed: Whether a run of it committed its input (``RunStarted``).
        started_runs: The runs whose ``RunStarted`` is in the log.
        ended_runs: The runs that ended, with how (``completed``, ``failed``,
            ``interrupted:<by>``).
        requests: Control request ids already applied or refused.
        error: Why it failed or was cancelled.
        reply: The final reply of the run that completed it.
        submitted_at: When it was submitted.
    """

    turn_id: str
    status: TurnStatus = TurnStatus.QUEUED
    revision: int = 0
    first_version: int = 0
    last_version: int = 0
    runs: list[str] = field(default_factory=list)
    attempts: int = 0
    input_committed: bool = False
    started_runs: set[str] = field(default_factory=set)
    ended_runs: dict[str, str] = field(default_factory=dict)
    requests: set[str] = field(default_factory=set)
    error: str | None = None
    reply: ev.Msg | None = None
    submitted_at: float = 0.0

    @property
    def terminal(self) -> bool:
        """Whether the turn has ended."""
        return self.status in TERMINAL

    @property
    def last_run(self) -> str | None:
        """Its latest run, if any."""
        return self.runs[-1] if self.runs else None

    def bump(self, version: int) -> None:
        """Count one transition, at ``version``."""
        self.revision += 1
        self.last_version = version


class TurnLedger:
    """The turns of one thread, folded record by record.

    Attributes:
        turns: Turn id → its info, in the order the log first names them.
        version: The last version folded.
    """

    def __init__(self) -> None:
        self.turns: dict[str, TurnInfo] = {}
        self.version = 0
        self._run_turn: dict[str, str] = {}
        self._replies: dict[str, ev.Msg] = {}

    def get(self, turn_id: str) -> TurnInfo | None:
        """The turn, if the folded records name it."""
        return self.turns.get(turn_id)

    def open_turns(self) -> list[TurnInfo]:
        """The turns that have not ended, in log order."""
        return [t for t in self.turns.values() if not t.terminal]

    def apply_all(self, records: Iterable[Record]) -> TurnLedger:
        """Fold several records; returns self."""
        for record in records:
            self.apply(record)
        return self

    def apply(self, record: Record) -> None:
        """Fold one record (records must come in version order, each once)."""
        if record.version <= self.version:
            return
        self.version = record.version
        for event in record.events:
            self._event(record, event)

    def turn_of_run(self, run_id: str | None) -> TurnInfo | None:
        """The turn a run executes, if it is one of the folded turns' runs."""
        if run_id is None:
            return None
        turn = self._run_turn.get(run_id)
        return self.turns.get(turn) if turn is not None else None

    def _event(self, record: Record, event: object) -> None:
        v = record.version
        info: TurnInfo | None
        match event:
            case te.TurnQueued(turn_id=turn_id):
                if turn_id not in self.turns:
                    new = TurnInfo(turn_id, first_version=v)
                    new.submitted_at = event.submitted_at
                    new.bump(v)
                    self.turns[turn_id] = new
            case te.TurnStarted(turn_id=turn_id, run_id=run_id):
                info = self._live(turn_id)
                if info is not None:
                    info.status = TurnStatus.RUNNING
                    info.runs.append(run_id)
                    info.attempts = max(info.attempts, event.attempt)
                    self._run_turn[run_id] = turn_id
                    info.bump(v)
            case ev.RunStarted(run_id=run_id, turn_id=turn_id):
                info = self.turn_of_run(run_id)
                if info is None and turn_id is not None:
                    info = self._live(turn_id)
                    if info is not None:
                        self._run_turn[run_id] = turn_id
                        if run_id not in info.runs:
                            info.runs.append(run_id)
                if info is not None:
                    info.started_runs.add(run_id)
                    if record.events and any(
                        isinstance(e, ev.MessageAppended) for e in record.events
                    ):
                        info.input_committed = True
            case ev.MessageAppended(message=msg):
                if msg.role == "assistant" and record.run_id in self._run_turn:
                    self._replies[record.run_id] = msg
            case ev.RunCompleted(run_id=run_id):
                info = self._run_end(run_id, "completed")
                if info is not None and not info.terminal:
                    info.status = TurnStatus.COMPLETED
                    info.reply = self._replies.get(run_id)
                    info.bump(v)
            case ev.RunFailed(run_id=run_id):
                info = self._run_end(run_id, "failed")
                if info is not None and not info.terminal:
                    info.status = TurnStatus.FAILED
                    info.error = event.error
                    info.bump(v)
            case ev.RunInterrupted(run_id=run_id, by=by):
                self._run_end(run_id, f"interrupted:{by}")
            case te.TurnTakenOver(turn_id=turn_id):
                info = self._live(turn_id)
                if info is not None:
                    info.bump(v)
            case te.TurnPaused(turn_id=turn_id):
                info = self._live(turn_id)
                if info is not None:
                    info.status = TurnStatus.PAUSED
                    info.requests.add(event.request_id)
                    info.error = event.reason or None
                    info.bump(v)
            case te.TurnResumed(turn_id=turn_id):
                info = self._live(turn_id)
                if info is not None:
                    info.status = TurnStatus.QUEUED
                    info.requests.add(event.request_id)
                    info.error = None
                    info.bump(v)
            case te.TurnCancelled(turn_id=turn_id):
                info = self._live(turn_id)
                if info is not None:
                    info.status = TurnStatus.CANCELLED
                    info.requests.add(event.request_id)
                    info.error = event.reason or "cancelled"
                    info.bump(v)
            case te.TurnFailed(turn_id=turn_id):
                info = self._live(turn_id)
                if info is not None:
                    info.status = TurnStatus.FAILED
                    info.error = event.error
                    info.bump(v)
            case te.TurnControlRefused(turn_id=turn_id):
                info = self.turns.get(turn_id)
                if info is not None:
                    info.requests.add(event.request_id)
            case _:
                pass

    def _live(self, turn_id: str) -> TurnInfo | None:
        info = self.turns.get(turn_id)
        return info if info is not None and not info.terminal else None

    def _run_end(self, run_id: str, how: str) -> TurnInfo | None:
        info = self.turn_of_run(run_id)
        if info is not None:
            info.ended_runs.setdefault(run_id, how)
        return info
