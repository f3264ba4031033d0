"""The run ledger (``projections.RunLedger``): which call a result settles.

Models may number their tool calls per response (``call_0``, ``call_1``, ...), so
the same call id comes back in later runs. A result settles the call its id names
in the most recent run that asked for it, as the thread's state does (its pending
calls are keyed by id, the latest request winning).
"""

from __future__ import annotations

from journal import ThreadKey
from journal import events as ev
from journal.codec import Record
from projections import RunLedger, fold

KEY = ThreadKey("agent", "s1", "alice")


def _records(*batches: tuple[str | None, list[object]]) -> list[Record]:
    return [
        Record(v, 1, "w", f"b{v}", run_id, 0.0, "", "", events)
        for v, (run_id, events) in enumerate(batches, 1)
    ]


def _one_call_run(
    run_id: str, call_id: str, output: str
) -> list[tuple[str, list[object]]]:
    return [
        (run_id, [ev.RunStarted(run_id)]),
        (run_id, [ev.ToolCallRequested(call_id, "search", {"q": output}, run_id)]),
        (run_id, [ev.ToolCallCompleted(call_id, output)]),
        (run_id, [ev.RunCompleted(run_id)]),
    ]


def test_a_call_id_used_again_in_a_later_run_settles_that_runs_call() -> None:
    records = _records(
        *_one_call_run("r1", "call_0", "first"),
        *_one_call_run("r2", "call_0", "second"),
    )
    ledger = RunLedger.finish(fold(RunLedger(), RunLedger().initial(KEY), records))
    (first,) = ledger["r1"].tool_calls
    (second,) = ledger["r2"].tool_calls
    assert (first.outcome, first.output, first.resolved_at) == ("ok", "first", 3)
    assert (second.outcome, second.output, second.resolved_at) == ("ok", "second", 7)
    assert RunLedger.uncertain(ledger) == []


def test_a_reconciliation_settles_the_latest_call_left_unknown() -> None:
    crashed = [
        ("r2", [ev.RunStarted("r2")]),
        ("r2", [ev.ToolCallRequested("call_0", "send", {}, "r2")]),
        (None, [ev.RunInterrupted("r2", "crash", by="recovery")]),
        (None, [ev.ToolCallReconciled("call_0", "sent", "checked the outbox")]),
    ]
    records = _records(*_one_call_run("r1", "call_0", "first"), *crashed)
    ledger = RunLedger.finish(fold(RunLedger(), RunLedger().initial(KEY), records))
    assert ledger["r1"].tool_calls[0].outcome == "ok"
    assert ledger["r1"].tool_calls[0].output == "first"
    settled = ledger["r2"].tool_calls[0]
    assert (settled.outcome, settled.output, settled.resolved_at) == (
        "reconciled",
        "sent",
        8,
    )
