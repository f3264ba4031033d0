"""What a worker does with tool calls of unknown outcome when it takes a turn over.

The engine never re-runs a tool on its own. A worker that takes over a turn whose
run left requested calls without a result asks the application's policy, which
returns one of:

- :class:`Hold` (the default, :func:`hold`): pause the turn; an operator
  reconciles the calls (``agent-journal reconcile``) and resumes it.
- :class:`Reconcile`: record the given outcomes, then continue the turn with a
  continuation run (the model sees the outcomes as the calls' results).
- :class:`Fail` (:func:`fail`): record each call's outcome as an error saying it is
  unknown, and end the turn failed.

Calls that no run of the turn requested (left by an ``Agent.call`` outside durable
turns, or by a turn that ended since, e.g. cancelled while held) are decided apart,
before the next turn of the thread runs, with ``Uncertain.run_id`` None: the
decision applies to the calls alone. ``Reconcile`` and ``Fail`` settle them and
the turn runs; ``Hold`` pauses the turn, which cannot run while the thread has
calls of unknown outcome, until an operator reconciles them and resumes it. The
turn is never failed for them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from journal import events as ev
    from journal.keys import ThreadKey
    from journal.runtime.uncertain import Outcome

__all__ = [
    "Decision",
    "Fail",
    "Hold",
    "Reconcile",
    "Uncertain",
    "UncertainPolicy",
    "fail",
    "hold",
]


@dataclass(frozen=True, slots=True)
class Uncertain:
    """The situation a policy decides.

    Attributes:
        key: The thread.
        turn_id: The turn taken over, or about to run.
        run_id: Its interrupted run whose calls these are. None: the calls belong
            to no run of the turn, and the decision applies to them alone
            (``Fail`` does not fail the turn; ``Hold`` pauses it).
        calls: The requested calls without a result.
    """

    key: ThreadKey
    turn_id: str
    run_id: str | None
    calls: list[ev.ToolCallRequested]


@dataclass(frozen=True, slots=True)
class Hold:
    """Pause the turn until an operator reconciles the calls and resumes it."""

    reason: str = "tool calls of unknown outcome: reconcile them, then resume"


@dataclass(frozen=True, slots=True)
class Reconcile:
    """Record these outcomes (call id → result text or block) and continue."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    reason: str = "reconciled by the application's takeover policy"


@dataclass(frozen=True, slots=True)
class Fail:
    """Record the calls as failed with an unknown outcome and fail the turn."""

    reason: str = "the worker running the turn was lost during a tool call"


Decision = Hold | Reconcile | Fail
UncertainPolicy = Callable[[Uncertain], Decision | Awaitable[Decision]]
"""Decides a takeover with uncertain calls (sync or async)."""


def hold(situation: Uncertain) -> Decision:
    """The default policy: pause the turn for an operator."""
    return Hold()


def fail(situation: Uncertain) -> Decision:
    """Fail the turn, recording each uncertain call as an unknown-outcome error."""
    return Fail()
