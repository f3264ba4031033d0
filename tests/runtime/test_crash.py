"""Crash between ToolCallRequested and its result, in a real child process."""

from __future__ import annotations

import asyncio
import json
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from journal import (
    Agent,
    Journal,
    LeaseAcquired,
    ModelResponse,
    RunInterrupted,
    RuntimeContext,
    ScriptedModel,
    ThreadKey,
    ToolCallReconciled,
    ToolCallRequested,
    ToolResultBlock,
    UncertainToolCallsError,
)
from projections import RunLedger, fold

from ._support import all_events, all_records, names

CHILD = pathlib.Path(__file__).with_name("_crash_child.py")
KEY = ThreadKey("payer", "s1", "alice")
TTL = 0.6


def crash_child(root: pathlib.Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(root), str(TTL)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert (root / "started").read_text() == "100"


async def wait_for_lease_expiry(root: pathlib.Path) -> None:
    lease = next(root.rglob("LEASE"))
    expires = json.loads(lease.read_text())["expires_at"]
    await asyncio.sleep(max(0.0, expires - time.time()) + 0.05)


async def test_crash_leaves_an_uncertain_call_that_must_be_reconciled(tmp_path):
    root = tmp_path / "journal"
    root.mkdir()
    await asyncio.to_thread(crash_child, root)
    j = Journal.open(root)
    records = await all_records(j, KEY)
    # Write-ahead: the request is durable, its result is not.
    assert names([(0, e) for r in records for e in r.events])[-1] == "ToolCallRequested"
    run_id = next(
        e.run_id for r in records for e in r.events if type(e).__name__ == "RunStarted"
    )

    calls = 0

    def counted(messages):
        nonlocal calls
        calls += 1
        return "paid, according to the bank"

    model = ScriptedModel([counted])
    agent = Agent("Payer", "payer", model, journal=j, lease_wait=5)
    ctx = RuntimeContext(user_id="alice", session_id="s1")

    # Once the dead writer's lease has expired, reading the state through the
    # runtime records the recovery: the run shows as interrupted.
    await wait_for_lease_expiry(root)
    state = await agent.get_agent_state("alice", "s1")
    assert state.shutdown_interrupted
    assert state.active_run_id is None
    assert list(state.tool_context.pending_calls) == ["pay-1"]
    recovery = [
        (r, e)
        for r in await all_records(j, KEY)
        for e in r.events
        if isinstance(e, RunInterrupted)
    ]
    assert len(recovery) == 1
    record, event = recovery[0]
    assert (event.run_id, event.by, event.reason) == (run_id, "recovery", "recovered")
    assert any(isinstance(e, LeaseAcquired) for e in record.events)  # the fence record

    pending = await agent.pending_tool_calls(ctx)
    assert pending == [
        ToolCallRequested("pay-1", "transfer", {"amount": 100}, run_id=run_id)
    ]

    # A new run is refused and commits nothing.
    head = await j.head(KEY)
    with pytest.raises(UncertainToolCallsError) as info:
        await agent.call("did it work?", ctx)
    assert info.value.call_ids == ["pay-1"]
    assert calls == 0
    assert await all_events(j, KEY, head + 1) == []

    ledger = RunLedger.finish(fold(RunLedger(), {}, await all_records(j, KEY)))
    assert ledger[run_id].status == "interrupted"
    assert [c.call_id for c in RunLedger.uncertain(ledger)] == ["pay-1"]

    # Reconciliation must name exactly the uncertain set.
    for wrong in ({}, {"pay-2": "done"}, {"pay-1": "done", "pay-2": "done"}):
        with pytest.raises(ValueError, match="pay-1"):
            await agent.reconcile_tool_calls(ctx, wrong, "checked the bank")
    with pytest.raises(UncertainToolCallsError):
        await agent.call("still refused", ctx)
    state = await agent.reconcile_tool_calls(
        ctx,
        {"pay-1": ToolResultBlock("pay-1", "transfer 100 confirmed by the bank")},
        "checked the bank",
    )
    assert state.tool_context.pending_calls == {}
    assert await agent.pending_tool_calls(ctx) == []
    reconciled = [
        e for _, e in await all_events(j, KEY) if isinstance(e, ToolCallReconciled)
    ]
    assert [(e.call_id, e.note, e.is_error) for e in reconciled] == [
        ("pay-1", "checked the bank", False)
    ]

    # The thread works again; the model sees the reconciled result.
    reply = await agent.call("did it work?", ctx)
    assert reply.text == "paid, according to the bank"
    assert calls == 1
    seen = model.calls[0]
    assert seen[-2].content[0] == ToolResultBlock(
        "pay-1", "transfer 100 confirmed by the bank"
    )
    state = await agent.get_agent_state(ctx)
    assert not state.shutdown_interrupted
    ledger = fold(RunLedger(), {}, await all_records(j, KEY))
    assert ledger[run_id].tool_calls[0].outcome == "reconciled"
    assert (await j.verify(KEY)).ok


async def test_pending_tool_calls_waits_for_the_dead_writers_lease(tmp_path):
    root = tmp_path / "journal"
    root.mkdir()
    await asyncio.to_thread(crash_child, root)
    j = Journal.open(root)
    agent = Agent(
        "Payer", "payer", ScriptedModel([ModelResponse("x")]), journal=j, lease_wait=5
    )
    ctx = RuntimeContext(user_id="alice", session_id="s1")
    # Straight after the crash the lease is still live: pending_tool_calls waits for
    # it (lease_wait), recovers the run, and reports the call.
    pending = await agent.pending_tool_calls(ctx)
    assert [p.call_id for p in pending] == ["pay-1"]
    kinds = names(await all_events(j, KEY))
    assert kinds[-2:] == ["LeaseAcquired", "RunInterrupted"]
