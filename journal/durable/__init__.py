"""Durable turns: a persistent per-thread queue, workers on any replica, control.

A :class:`DurableClient` queues turns (``submit``, idempotent on ``turn_id``) in
the durable index beside the journal's threads and controls them (pause, resume
with a revision, cancel); :class:`Worker` processes on any number of replicas
take each thread's turns in order under its lease, run them through the agent
runtime and take over the turns of a worker that died. Every transition is an
event in the thread's log (``journal.turn_events``). See docs/DURABLE.md.

Modules, imports pointing down: ``client`` and ``worker`` (the faces of the
package), ``policy`` (uncertain tool calls at a takeover), ``ledger`` (a thread's
turns folded from its log), ``index`` (the index objects), ``errors``.
"""

from __future__ import annotations

from journal.durable.client import DurableClient, Turn, TurnView
from journal.durable.errors import (
    StaleRevisionError,
    TurnCancelledError,
    TurnFailedError,
    TurnNotFoundError,
    TurnStateError,
)
from journal.durable.index import DurableIndex
from journal.durable.ledger import TurnInfo, TurnLedger, TurnStatus
from journal.durable.policy import (
    Decision,
    Fail,
    Hold,
    Reconcile,
    Uncertain,
    UncertainPolicy,
    fail,
    hold,
)
from journal.durable.worker import FAULT_POINTS, Worker

__all__ = [
    "FAULT_POINTS",
    "Decision",
    "DurableClient",
    "DurableIndex",
    "Fail",
    "Hold",
    "Reconcile",
    "StaleRevisionError",
    "Turn",
    "TurnCancelledError",
    "TurnFailedError",
    "TurnInfo",
    "TurnLedger",
    "TurnNotFoundError",
    "TurnStateError",
    "TurnStatus",
    "TurnView",
    "Uncertain",
    "UncertainPolicy",
    "Worker",
    "fail",
    "hold",
]
