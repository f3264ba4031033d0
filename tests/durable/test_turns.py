"""Durable turns on one process: submit, status, pause/resume, cancel, faults."""

from __future__ import annotations

import asyncio
import json

import pytest

from journal import (
    Agent,
    Journal,
    ModelResponse,
    Msg,
    RuntimeContext,
    ScriptedModel,
    StorageError,
    ToolCall,
)
from journal import events as ev
from journal import turn_events as te
from journal.durable import (
    FAULT_POINTS,
    DurableClient,
    Fail,
    Hold,
    Reconcile,
    StaleRevisionError,
    TurnCancelledError,
    TurnFailedError,
    TurnStatus,
    Worker,
)
from journal.durable.index import Control
from journal.keys import decode_segment, encode_segment
from stores.memory import MemoryStore

from ._support import check_invariants, echo

CTX = RuntimeContext(user_id="alice", session_id="s1")


def make(tmp_path, model=None, tools=(), **worker):
    j = Journal.open(tmp_path / "j")
    agent = Agent(
        "A", "a", model or ScriptedModel([echo] * 500), tools=tools, journal=j
    )
    client = DurableClient(j, "a", poll=0.02)
    options = {"poll": 0.02, "control_poll": 0.02, "lease_ttl": 5.0, **worker}
    return j, agent, client, Worker(agent, **options)


async def test_submit_runs_in_fifo_order_and_returns_the_reply(tmp_path):
    _, _, client, worker = make(tmp_path)
    turns = [await client.submit(CTX, f"m{i}") for i in range(5)]
    assert (await turns[0].status()).status is TurnStatus.QUEUED
    assert await worker.drain() == 5
    replies = [(await t.result()).text for t in turns]
    assert replies == [f"echo m{i}" for i in range(5)]
    await check_invariants(client, {client.key(CTX): [t.turn_id for t in turns]})


async def test_resubmission_with_the_same_turn_id_is_idempotent(tmp_path):
    _, _, client, worker = make(tmp_path)
    first = await client.submit(CTX, "once", turn_id="t-1")
    again = await client.submit(CTX, "twice", turn_id="t-1")  # still queued
    assert again.turn_id == first.turn_id
    assert len((await client.index.list_thread(client.key(CTX))).turns) == 1
    await worker.drain()
    late = await client.submit(CTX, "thrice", turn_id="t-1")  # ended already
    assert (await late.status()).status is TurnStatus.COMPLETED
    assert not (await client.index.list_thread(client.key(CTX))).turns
    assert (await first.result()).text == "echo once"
    await check_invariants(client, {client.key(CTX): ["t-1"]})


async def test_a_turn_id_too_long_for_its_entry_name_is_seen_and_run(tmp_path):
    _, _, client, worker = make(tmp_path)
    # 128 valid characters; ':' and '.' encode to 3 bytes each, so the entry's
    # name holds the hashed long form of the id.
    long_id = ("tenant:acme.req:" * 8)[:128]
    assert decode_segment(encode_segment(long_id)) is None
    first = await client.submit(CTX, "before", turn_id="short-1")
    turn = await client.submit(CTX, "long", turn_id=long_id)
    last = await client.submit(CTX, "after", turn_id="short-2")
    assert (await turn.status()).status is TurnStatus.QUEUED
    views = await client.turns(client.key(CTX))
    assert [v.turn_id for v in views] == ["short-1", long_id, "short-2"]
    again = await client.submit(CTX, "twice", turn_id=long_id)  # idempotent
    assert again.turn_id == long_id
    assert len((await client.index.list_thread(client.key(CTX))).turns) == 3
    assert await worker.drain() == 3
    assert (await turn.result()).text == "echo long"
    assert (await first.result()).text == "echo before"
    assert (await last.result()).text == "echo after"
    await check_invariants(client, {client.key(CTX): ["short-1", long_id, "short-2"]})


async def test_a_bad_turn_id_or_empty_input_is_refused(tmp_path):
    _, _, client, _ = make(tmp_path)
    with pytest.raises(ValueError, match="turn_id"):
        await client.submit(CTX, "x", turn_id="a/b")
    with pytest.raises(ValueError, match="input"):
        await client.submit(CTX, [])


async def test_pause_then_resume_with_a_stale_revision_is_refused(tmp_path):
    _, _, client, worker = make(tmp_path)
    turn = await client.submit(CTX, "later", turn_id="p")
    after = await client.submit(CTX, "after", turn_id="q")
    await turn.pause("req-1", reason="hold on")
    await turn.pause("req-1")  # the same request again: applied once
    await worker.drain()
    view = await turn.status()
    assert view.status is TurnStatus.PAUSED
    # FIFO: the turn behind a paused one waits.
    assert (await after.status()).status is TurnStatus.QUEUED
    with pytest.raises(StaleRevisionError):
        await turn.resume(view.revision - 1)
    await turn.resume(view.revision)
    await worker.drain()
    assert (await turn.result()).text == "echo later"
    assert (await after.result()).text == "echo after"
    records = [r async for r in client.journal.records(client.key(CTX))]
    paused = [e for r in records for e in r.events if isinstance(e, te.TurnPaused)]
    assert len(paused) == 1
    await check_invariants(client, {client.key(CTX): ["p", "q"]})


async def test_a_resume_that_went_stale_before_it_was_applied_is_refused(tmp_path):
    _, _, client, worker = make(tmp_path)
    turn = await client.submit(CTX, "x", turn_id="p")
    await turn.pause()
    await worker.drain()
    view = await turn.status()
    await turn.resume(view.revision)
    await turn.resume(view.revision)  # both pass the client's check ...
    await worker.drain()
    records = [r async for r in client.journal.records(client.key(CTX))]
    refused = [
        e for r in records for e in r.events if isinstance(e, te.TurnControlRefused)
    ]
    assert len(refused) == 1
    assert "not paused" in refused[0].reason
    assert (await turn.status()).status is TurnStatus.COMPLETED


async def test_cancel_of_a_queued_turn(tmp_path):
    _, _, client, worker = make(tmp_path)
    turn = await client.submit(CTX, "never", turn_id="c")
    other = await client.submit(CTX, "runs", turn_id="d")
    await turn.cancel("not needed")
    await worker.drain()
    with pytest.raises(TurnCancelledError, match="not needed"):
        await turn.result()
    assert (await other.result()).text == "echo runs"
    records = [r async for r in client.journal.records(client.key(CTX))]
    assert not any(
        getattr(e, "turn_id", None) == "c"
        for r in records
        for e in r.events
        if type(e).__name__ == "RunStarted"
    )
    await check_invariants(client, {client.key(CTX): ["c", "d"]})


class Crash(BaseException):
    """A worker dying at a chosen point of a claim."""


def slow_tool_model(gate: asyncio.Event):
    async def wait_here() -> str:
        """Blocks until the test opens the gate."""
        await gate.wait()
        return "done waiting"

    model = ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall("wait_here", {}, id="w1")]), echo, echo]
    )
    return model, [wait_here]


@pytest.mark.parametrize("op", ["cancel", "pause"])
async def test_stopping_a_running_turn_waits_for_its_next_checkpoint(tmp_path, op):
    gate = asyncio.Event()
    model, tools = slow_tool_model(gate)
    crashed = []

    def fault(point):
        # A crash right after the stop is committed, before its request is gone.
        if point == "stopped" and not crashed:
            crashed.append(point)
            raise Crash(point)

    _, agent, client, crashing = make(tmp_path, model, tools, fault=fault)
    worker = Worker(agent, poll=0.02, control_poll=0.02)
    turn = await client.submit(CTX, "go", turn_id="r")
    task = asyncio.create_task(crashing.drain())
    while (await turn.status()).status is not TurnStatus.RUNNING:
        await asyncio.sleep(0.01)
    await getattr(turn, op)()
    await asyncio.sleep(0.1)  # the worker sees the request; the tool still runs
    gate.set()  # cooperative: the tool finishes, the run stops after it
    with pytest.raises(Crash):
        await task
    assert crashed == ["stopped"]
    await worker.drain()  # finds the request applied already: applies it once
    records = [r async for r in client.journal.records(client.key(CTX))]
    events = [e for r in records for e in r.events]
    done = [e for e in events if type(e).__name__ == "ToolCallCompleted"]
    assert done[0].output == "done waiting"  # not cut short
    stops = [e for e in events if isinstance(e, te.TurnPaused | te.TurnCancelled)]
    assert len(stops) == 1
    interrupted = [e for e in events if type(e).__name__ == "RunInterrupted"]
    assert interrupted
    assert op in interrupted[0].reason
    if op == "cancel":
        with pytest.raises(TurnCancelledError):
            await turn.result()
        assert isinstance(events[-1], te.TurnCancelled) or any(
            isinstance(e, te.TurnCancelled) and e.run_id for e in events
        )
    else:
        view = await turn.status()
        assert view.status is TurnStatus.PAUSED
        await turn.resume(view.revision)
        await worker.drain()
        assert (await turn.result()).text.startswith("echo")
        started = [e for e in events if isinstance(e, te.TurnStarted)]
        assert started[0].with_input
    await check_invariants(client, {client.key(CTX): ["r"]})


class Crash(BaseException):
    """A worker dying at a chosen point (no cleanup of ours runs)."""


class Outage:
    """Cuts the store's writes off from inside a tool: the worker is lost there
    (its result cannot be committed, its lease cannot be released)."""

    def __init__(self, store):
        self.store = store

    def start(self):
        def refuse(*args, **kwargs):
            raise StorageError("the worker lost its storage")

        self.store.create = refuse
        self.store.replace = refuse

    def end(self):
        del self.store.create
        del self.store.replace


def crash_tool_model(outage_box):
    calls = {"n": 0}

    def transfer(amount: int) -> str:
        """A side effect whose outcome a crash makes unknown."""
        calls["n"] += 1
        if calls["n"] == 1:
            outage_box[0].start()
        return "sent"

    model = ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall("transfer", {"amount": 5}, id="pay")])]
        + [echo] * 10
    )
    return model, [transfer]


@pytest.mark.parametrize("policy", ["hold", "reconcile", "fail"])
async def test_takeover_after_a_crash_in_a_tool_follows_the_policy(tmp_path, policy):
    box = []
    model, tools = crash_tool_model(box)
    j, agent, client, crashing = make(tmp_path, model, tools, lease_ttl=0.4)
    box.append(Outage(j.store))
    turn = await client.submit(CTX, "pay", turn_id="t")
    await crashing.drain(idle_rounds=1)  # the claim is lost, the worker goes on
    box[0].end()
    await asyncio.sleep(0.5)  # the lost worker's lease expires
    chosen = {
        "hold": None,
        "reconcile": lambda u: Reconcile(
            {c.call_id: "sent (checked)" for c in u.calls}
        ),
        "fail": lambda u: Fail(),
    }[policy]
    extra = {"uncertain": chosen} if chosen else {}
    worker = Worker(agent, poll=0.02, control_poll=0.02, **extra)
    await worker.drain()
    records = [r async for r in j.records(client.key(CTX))]
    taken = [e for r in records for e in r.events if isinstance(e, te.TurnTakenOver)]
    assert len(taken) == 1
    assert taken[0].uncertain == ["pay"]
    assert taken[0].decision == policy
    if policy == "hold":
        view = await turn.status()
        assert view.status is TurnStatus.PAUSED
        await agent.reconcile_tool_calls(CTX, {"pay": "sent (bank says)"})
        await agent.close()
        await turn.resume(view.revision)
        await worker.drain()
    if policy == "fail":
        with pytest.raises(TurnFailedError):
            await turn.result()
    else:
        assert (await turn.result()).text == "echo pay"
    await agent.close()
    await check_invariants(client, {client.key(CTX): ["t"]})


@pytest.mark.parametrize("point", [p for p in FAULT_POINTS if p != "stopped"])
async def test_a_crash_at_each_step_of_a_claim_loses_and_repeats_nothing(
    tmp_path, point
):
    _, agent, client, _ = make(tmp_path)
    keys = {}
    for s in range(2):
        ctx = RuntimeContext(user_id="alice", session_id=f"s{s}")
        ids = [f"t{s}-{i}" for i in range(4)]
        for i, tid in enumerate(ids):
            turn = await client.submit(ctx, f"m{i}", turn_id=tid)
            if i == 1:
                await turn.pause("p")  # controls and a pause in every claim
            if i == 2:
                await turn.cancel()
        keys[client.key(ctx)] = ids
    hits = {"n": 0}

    def fault(name: str) -> None:
        if name == point:
            hits["n"] += 1
            if hits["n"] in (1, 3):
                raise Crash(name)

    crashes = 0
    for _ in range(12):
        worker = Worker(agent, poll=0.01, control_poll=0.01, fault=fault, concurrency=1)
        try:
            await worker.drain(idle_rounds=1)
        except Crash:
            crashes += 1
            continue
        # Resume the paused turns (a fresh status each time: revisions move).
        resumed = False
        for key, ids in keys.items():
            view = await client.view(key, ids[1])
            if view.status is TurnStatus.PAUSED:
                await client.turn(key, ids[1]).resume(view.revision)
                resumed = True
        if not resumed:
            break
    await Worker(agent, poll=0.01).drain()
    assert hits["n"] >= 1, f"fault point {point} never reached"
    await check_invariants(client, keys)


class HeldLeaseReads(MemoryStore):
    """Holds reads of ``LEASE`` while ``held`` (a slow store round trip)."""

    def __init__(self) -> None:
        super().__init__()
        self.held = False
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def read(self, key):
        if self.held and key.endswith("/LEASE"):
            self.entered.set()
            await self.gate.wait()
        return await super().read(key)


@pytest.mark.parametrize("when", ["acquiring", "before it started"])
async def test_a_worker_cancelled_mid_claim_claims_the_thread_again(when):
    store = HeldLeaseReads()
    j = Journal(store)
    agent = Agent("A", "a", ScriptedModel([echo] * 5), journal=j)
    client = DurableClient(j, "a", poll=0.02)
    turn = await client.submit(CTX, "hi", turn_id="t1")
    draining: list[asyncio.Task] = []

    def agents(key):
        if when == "before it started" and draining:
            # The worker's task is cancelled as the scan creates the claim: the
            # claim's task is cancelled before its first step.
            draining.pop().cancel()
        return agent

    worker = Worker(agents, j, poll=0.02, control_poll=0.02)
    store.held = when == "acquiring"
    draining.append(asyncio.create_task(worker.drain()))
    task = draining[0]
    if when == "acquiring":
        await store.entered.wait()
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.held = False
    # The same worker instance claims the thread again.
    assert await worker.drain() == 1
    assert (await turn.result()).text == "echo hi"


async def test_an_unknown_control_op_is_refused_before_anything_is_written(tmp_path):
    _, _, client, _ = make(tmp_path)
    await client.submit(CTX, "x", turn_id="t")
    with pytest.raises(ValueError, match="'stop'"):
        await client.control(client.key(CTX), "t", "stop")  # type: ignore[arg-type]
    assert not (await client.index.list_thread(client.key(CTX))).controls


async def test_bad_index_objects_are_set_aside_and_spare_every_thread(tmp_path):
    j, agent, client, _ = make(tmp_path)
    other = RuntimeContext(user_id="bob", session_id="s2")
    await client.submit(CTX, "a", turn_id="ta")
    await client.submit(other, "b", turn_id="tb")
    key = client.key(CTX)
    base = client.index.thread_dir(key)
    # A request whose op this worker does not know (a newer client's), a control
    # and a turn entry that are not JSON, one whose name hashes its turn id.
    request = Control(
        op="stop",
        turn_id="ta",
        request_id="r-stop",
        agent_id=key.agent_id,
        session_id=key.session_id,
        user_id=key.user_id,
        thread_id=key.thread_id,
        namespace=key.namespace,
    )
    await client.index.add_control(request)
    await j.store.create(f"{base}c{0:020d}.garbage", b"not json")
    await j.store.create(f"{base}t{2:012d}.bad", b"not json")
    await j.store.create(f"{base}t{3:012d}.%%bad%%{'0' * 64}", b"{}")
    for _ in range(2):  # a restarted worker finds nothing left to trip on
        worker = Worker(agent, poll=0.02, control_poll=0.02)
        await worker.drain()
    assert (await client.turn(other, "tb").result()).text == "echo b"
    assert (await client.turn(CTX, "ta").result()).text == "echo a"
    bad = await client.view(key, "bad")
    assert bad.status is TurnStatus.FAILED
    assert "cannot be read" in (bad.error or "")
    records = [r async for r in j.records(key)]
    refused = [
        e for r in records for e in r.events if isinstance(e, te.TurnControlRefused)
    ]
    assert [(e.op, e.request_id) for e in refused] == [("stop", "r-stop")]
    assert (await client.index.list_thread(key)).names == frozenset()
    # Copies for an operator, beside the entries (an erase of them deletes them).
    kept = [k.rpartition("/")[2] for k in await j.store.list(base)]
    assert sorted(kept) == sorted(
        [f"xc{0:020d}.garbage", f"xt{2:012d}.bad", f"xt{3:012d}.%%bad%%{'0' * 64}"]
    )
    assert key not in await client.threads_with_work()  # no work left to scan


async def crashed_in_a_tool(j, client, ctx, turn_id):
    """A turn whose worker died inside a tool call: its call ``pay`` is uncertain."""
    turn = await client.submit(ctx, "pay", turn_id=turn_id)
    key = client.key(ctx)
    ref = (await client.index.list_thread(key)).find(turn_id)
    async with j.writer(key, "dead-worker") as w:
        await w.append([te.TurnQueued(turn_id, 0.0, 1, ref.key)])
        await w.append([te.TurnStarted(turn_id, "r0", "dead-worker")])
        started = ev.RunStarted("r0", turn_id=turn_id)
        await w.append([started, ev.MessageAppended(Msg("user", "pay"))], run_id="r0")
        await w.append([ev.ToolCallRequested("pay", "transfer", {}, run_id="r0")])
    # The writer is closed without ending the run: the next holder recovers it.
    return turn


def wrong_call(u):
    return Reconcile({"wrong-id": "done"})


def raises(u):
    raise RuntimeError("the bank's API is down")


@pytest.mark.parametrize("policy", [wrong_call, raises, lambda u: "yes"])
async def test_a_failing_policy_holds_its_turn_and_spares_other_threads(
    tmp_path, policy
):
    j, agent, client, _ = make(tmp_path)
    turn = await crashed_in_a_tool(j, client, CTX, "t")
    other = await client.submit(RuntimeContext(user_id="bob", session_id="s2"), "b")
    for _ in range(2):  # every restart: no crash, the turn stays held
        await Worker(agent, poll=0.02, control_poll=0.02, uncertain=policy).drain()
    assert (await other.result()).text == "echo b"
    view = await turn.status()
    assert view.status is TurnStatus.PAUSED
    assert "policy failed" in (view.error or "")
    records = [r async for r in j.records(client.key(CTX))]
    taken = [e for r in records for e in r.events if isinstance(e, te.TurnTakenOver)]
    assert [(e.uncertain, e.decision) for e in taken] == [(["pay"], "hold")]
    # The operator's way out works as for a Hold.
    await agent.reconcile_tool_calls(CTX, {"pay": "sent (bank says)"})
    await agent.close()
    await turn.resume(view.revision)
    await Worker(agent, poll=0.02, control_poll=0.02, uncertain=policy).drain()
    assert (await turn.result()).text == "echo pay"


@pytest.mark.parametrize("how", ["close", "cancel"])
async def test_a_worker_stopped_mid_tool_leaves_the_call_to_the_policy(tmp_path, how):
    started = asyncio.Event()
    sent: list[int] = []

    async def transfer(amount: int) -> str:
        """Sends money: a side effect whose outcome a stop makes unknown."""
        sent.append(amount)
        started.set()
        await asyncio.Event().wait()  # the bank never answers before the stop
        return "sent"

    model = ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall("transfer", {"amount": 5}, id="pay")])]
        + [echo] * 5
    )
    j, agent, client, first = make(tmp_path, model, [transfer])
    turn = await client.submit(CTX, "pay 5", turn_id="t")
    task = asyncio.create_task(first.run())
    await started.wait()
    if how == "close":
        await first.close()  # a graceful shutdown (a rolling deploy)
        await task
    else:
        task.cancel()  # a signal handler cancelling the worker's task
        with pytest.raises(asyncio.CancelledError):
            await task
    asked: list[list[str]] = []

    def policy(u):
        asked.append([c.call_id for c in u.calls])
        return Hold()

    await Worker(agent, poll=0.02, control_poll=0.02, uncertain=policy).drain()
    assert asked == [["pay"]]
    view = await turn.status()
    assert view.status is TurnStatus.PAUSED
    records = [r async for r in j.records(client.key(CTX))]
    events = [e for r in records for e in r.events]
    assert not [e for e in events if isinstance(e, ev.ToolCallCompleted)]
    assert sent == [5]  # not run again


async def died_in_a_tool_outside_turns(j, key):
    """An ``Agent.call`` whose process died in a tool: its call ``old`` is uncertain."""
    async with j.writer(key, "crashed-process") as w:
        started = [ev.RunStarted("r-call"), ev.MessageAppended(Msg("user", "pay"))]
        await w.append(started, run_id="r-call")
        old = ev.ToolCallRequested("old", "transfer", {}, run_id="r-call")
        await w.append([old], run_id="r-call")
    # Closed without ending the run: the next holder recovers it.


@pytest.mark.parametrize("decision", ["fail", "reconcile", "hold"])
async def test_calls_of_no_turn_are_settled_without_ending_the_next_turn(
    tmp_path, decision
):
    j, agent, client, _ = make(tmp_path)
    await died_in_a_tool_outside_turns(j, client.key(CTX))
    turn = await client.submit(CTX, "what's my balance?", turn_id="new")
    asked = []

    def policy(u):
        asked.append((u.turn_id, u.run_id, [c.call_id for c in u.calls]))
        return {
            "fail": Fail(),
            "reconcile": Reconcile({"old": "sent (bank says)"}),
            "hold": Hold("reconcile the old transfer first"),
        }[decision]

    worker = Worker(agent, poll=0.02, control_poll=0.02, uncertain=policy)
    await worker.drain()
    # Asked once, for the calls alone: they belong to no run of the turn.
    assert asked == [("new", None, ["old"])]
    records = [r async for r in j.records(client.key(CTX))]
    events = [e for r in records for e in r.events]
    assert not [e for e in events if isinstance(e, te.TurnTakenOver)]
    if decision == "hold":
        view = await turn.status()
        assert view.status is TurnStatus.PAUSED  # waits; not failed
        assert view.error == "reconcile the old transfer first"
        await agent.reconcile_tool_calls(CTX, {"old": "sent (bank says)"})
        await agent.close()
        await turn.resume(view.revision)
        await worker.drain()
    else:
        settled = [e for e in events if isinstance(e, ev.ToolCallReconciled)]
        assert [(e.call_id, e.is_error) for e in settled] == [
            ("old", decision == "fail")
        ]
    assert (await turn.result()).text == "echo what's my balance?"
    await check_invariants(client, {client.key(CTX): ["new"]})


async def test_a_turns_own_calls_and_others_are_decided_apart(tmp_path):
    j, agent, client, _ = make(tmp_path)
    await died_in_a_tool_outside_turns(j, client.key(CTX))
    await agent.reconcile_tool_calls(CTX, {"old": "x"})  # lets the turn start ...
    await agent.close()
    turn = await crashed_in_a_tool(j, client, CTX, "t")
    async with j.writer(client.key(CTX), "dead-worker") as w:  # ... and a stray
        await w.append([ev.ToolCallRequested("stray", "transfer", {}, run_id="r9")])
    asked = []

    def policy(u):
        asked.append((u.run_id, [c.call_id for c in u.calls]))
        return Reconcile({c.call_id: "checked" for c in u.calls})

    await Worker(agent, poll=0.02, control_poll=0.02, uncertain=policy).drain()
    assert asked == [("r0", ["pay"]), (None, ["stray"])]
    assert (await turn.result()).text == "echo pay"
    records = [r async for r in j.records(client.key(CTX))]
    taken = [e for r in records for e in r.events if isinstance(e, te.TurnTakenOver)]
    assert [(e.uncertain, e.decision) for e in taken] == [(["pay"], "reconcile")]


async def test_the_cli_lists_turns_by_status_and_sends_controls(tmp_path, capsys):
    from journal.cli.app import main

    _, _, client, worker = make(tmp_path)
    await client.submit(CTX, "a", turn_id="done-1")
    await worker.drain()
    await client.submit(CTX, "b", turn_id="wait-1")
    root = str(tmp_path / "j")
    assert await asyncio.to_thread(main, ["--root", root, "--json", "turns"]) == 0
    rows = json.loads(capsys.readouterr().out)["turns"]
    assert {(r["turn_id"], r["status"]) for r in rows} == {
        ("done-1", "completed"),
        ("wait-1", "queued"),
    }
    args = ["--root", root, "turns", "--status", "queued"]
    assert await asyncio.to_thread(main, args) == 0
    assert "wait-1" in capsys.readouterr().out
    flags = ["--agent", "a", "--session", "s1", "--user", "alice"]
    cancel = ["--root", root, "turns", *flags, "--cancel", "wait-1"]
    assert await asyncio.to_thread(main, cancel) == 0
    resume = ["--root", root, "turns", *flags, "--resume", "done-1"]
    assert await asyncio.to_thread(main, resume) == 2  # no --revision
    assert "--revision" in capsys.readouterr().err
    await worker.drain()
    assert (await client.view(client.key(CTX), "wait-1")).status is TurnStatus.CANCELLED
    log = ["--root", root, "log", "--agent", "a", "--session", "s1", "--user", "alice"]
    assert await asyncio.to_thread(main, log) == 0
    assert "TurnCancelled" in capsys.readouterr().out
