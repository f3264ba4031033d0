"""The events of durable turns: a turn's transitions, recorded in its thread's log.

A *turn* is one queued request to an agent (``journal.durable``): its input
messages wait in the durable index until a worker holding the thread's lease takes
the turn up; from then on every transition is one of these events, in the thread's
log, next to the runs that execute the turn (``RunStarted.turn_id`` names it). A
turn completes when one of its runs completes (``RunCompleted``) and fails when one
fails (``RunFailed``); the other transitions have events of their own.

They are registered as *optional* events: they do not change ``AgentState``, so a
reader that does not know them builds the same state by skipping them.
"""

from __future__ import annotations

import msgspec

from journal.events import Event

__all__ = [
    "TURN_EVENTS",
    "TurnCancelled",
    "TurnControlRefused",
    "TurnFailed",
    "TurnPaused",
    "TurnQueued",
    "TurnResumed",
    "TurnStarted",
    "TurnTakenOver",
]


class TurnQueued(Event, frozen=True):
    """A turn entered its thread's log (its input is still in the index).

    Attributes:
        turn_id: The turn.
        submitted_at: When the client submitted it (its wall clock).
        inputs: How many input messages it brings (committed by its first run).
        entry: The turn's key in the durable index.
    """

    turn_id: str
    submitted_at: float = 0.0
    inputs: int = 0
    entry: str = ""


class TurnStarted(Event, frozen=True):
    """A worker starts a run of the turn (the first, or a continuation).

    Attributes:
        turn_id: The turn.
        run_id: The run about to start (its ``RunStarted`` follows).
        worker: The worker's lease holder id.
        attempt: 1 for the run that commits the turn's input; above 1 for a
            continuation after a pause, a takeover or a run that never started.
        with_input: Whether this run commits the turn's input messages.
    """

    turn_id: str
    run_id: str
    worker: str = ""
    attempt: int = 1
    with_input: bool = True


class TurnTakenOver(Event, frozen=True):
    """A worker found the turn's run interrupted (its worker died or stopped).

    Attributes:
        turn_id: The turn.
        run_id: The interrupted run.
        worker: The worker taking the turn over.
        uncertain: The tool calls of that run whose outcome is unknown.
        decision: What the application's policy decided (``continue``,
            ``reconcile``, ``hold``, ``fail``).
    """

    turn_id: str
    run_id: str
    worker: str = ""
    uncertain: list[str] = msgspec.field(default_factory=list)
    decision: str = "continue"


class TurnPaused(Event, frozen=True):
    """The turn is paused: no run of it starts until it is resumed.

    Attributes:
        turn_id: The turn.
        request_id: The pause request's id (a repeated request is applied once).
        run_id: The run the pause stopped at its checkpoint, if one was running.
        reason: Why (the requester's text, or the uncertain-call policy's).
    """

    turn_id: str
    request_id: str = ""
    run_id: str | None = None
    reason: str = ""


class TurnResumed(Event, frozen=True):
    """A paused turn was resumed (from the revision the requester saw).

    Attributes:
        turn_id: The turn.
        revision: The turn's revision the resume was asked against.
        request_id: The resume request's id.
    """

    turn_id: str
    revision: int = 0
    request_id: str = ""


class TurnCancelled(Event, frozen=True):
    """The turn was cancelled: it ends without running (further).

    Attributes:
        turn_id: The turn.
        run_id: The run the cancel stopped at its checkpoint, if one was running.
        reason: Why.
        request_id: The cancel request's id.
    """

    turn_id: str
    run_id: str | None = None
    reason: str = ""
    request_id: str = ""


class TurnFailed(Event, frozen=True):
    """The turn ended failed without a failed run (a policy or a refused start).

    Attributes:
        turn_id: The turn.
        error: What went wrong.
    """

    turn_id: str
    error: str = ""


class TurnControlRefused(Event, frozen=True):
    """A control request was not applied (a stale revision, a finished turn).

    Attributes:
        turn_id: The turn.
        op: The request (``pause``, ``resume``, ``cancel``).
        request_id: The request's id.
        reason: Why it was refused.
    """

    turn_id: str
    op: str = ""
    request_id: str = ""
    reason: str = ""


TURN_EVENTS: tuple[type[Event], ...] = (
    TurnQueued,
    TurnStarted,
    TurnTakenOver,
    TurnPaused,
    TurnResumed,
    TurnCancelled,
    TurnFailed,
    TurnControlRefused,
)
"""Every turn event, in the order the codec registers them."""
