"""Shared pieces of the durable-turn tests: models, and the invariants checked."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from journal import events as ev
from journal import turn_events as te
from journal.durable import DurableClient, TurnLedger, TurnStatus

if TYPE_CHECKING:
    from pathlib import Path

PRIVATE_INPUT = "my card number is 4111-1111-1111-1111"
"""A user's input that must not be left readable (erase, encryption)."""


def files_holding(root: Path, data: bytes) -> list[str]:
    """The files under ``root`` (relative paths) whose bytes contain ``data``."""
    return [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and data in p.read_bytes()
    ]


def echo(messages: list[ev.Msg]) -> str:
    """A model reply naming the latest user message (the turn's input)."""
    users = [m for m in messages if m.role == "user"]
    return f"echo {users[-1].text}" if users else "echo"


async def check_invariants(
    client: DurableClient, submitted: dict[object, list[str]]
) -> dict[str, TurnLedger]:
    """Every submitted turn ended exactly once, started in FIFO order, input once.

    Args:
        client: The client (its journal is read).
        submitted: Thread key -> its turn ids in submission order.

    Returns:
        The ledger of every thread, by ``str(key)``.
    """
    ledgers: dict[str, TurnLedger] = {}
    for key, turn_ids in submitted.items():
        records = [r async for r in client.journal.records(key)]
        ledger = TurnLedger().apply_all(records)
        ledgers[str(key)] = ledger
        label = str(key)
        for turn_id in turn_ids:
            info = ledger.get(turn_id)
            assert info is not None, f"{label}: turn {turn_id} never reached the log"
            assert info.terminal, f"{label}: turn {turn_id} is {info.status}"
        ends: Counter[str] = Counter()
        inputs: Counter[str] = Counter()
        first_start: list[str] = []
        queued: Counter[str] = Counter()
        for record in records:
            for event in record.events:
                turn = ledger.turn_of_run(getattr(event, "run_id", None))
                match event:
                    case te.TurnQueued(turn_id=t):
                        queued[t] += 1
                    case te.TurnStarted(turn_id=t):
                        if t not in first_start:
                            first_start.append(t)
                    case te.TurnCancelled(turn_id=t) | te.TurnFailed(turn_id=t):
                        ends[t] += 1
                    case ev.RunCompleted() | ev.RunFailed() if turn is not None:
                        ends[turn.turn_id] += 1
                    case ev.RunStarted(turn_id=t) if t is not None:
                        if any(
                            isinstance(e, ev.MessageAppended) for e in record.events
                        ):
                            inputs[t] += 1
        for turn_id in turn_ids:
            assert queued[turn_id] == 1, f"{label}: {turn_id} queued {queued[turn_id]}x"
            assert ends[turn_id] == 1, f"{label}: {turn_id} ended {ends[turn_id]} times"
            info = ledger.get(turn_id)
            assert info is not None
            if info.status is TurnStatus.COMPLETED:
                assert inputs[turn_id] == 1, (
                    f"{label}: {turn_id} input {inputs[turn_id]}x"
                )
        started = [t for t in turn_ids if t in first_start]
        assert first_start == started, f"{label}: FIFO broken: {first_start}"
        view = await client.index.list_thread(key)  # type: ignore[arg-type]
        assert not view.turns, f"{label}: entries left: {view.turns}"
    return ledgers
