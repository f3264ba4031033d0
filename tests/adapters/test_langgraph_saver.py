"""JournalSaver beyond the conformance kit: sync twins, graphs, deltas, leases."""

from __future__ import annotations

import asyncio
import operator
import uuid
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.graph import END, START, StateGraph

from journal import Journal, ThreadKey
from journal.adapters.langgraph import (
    CheckpointFencedError,
    CheckpointLeaseHeldError,
    JournalSaver,
    LangGraphCheckpointSaved,
)
from journal.errors import FencedError


class State(TypedDict):
    big: str
    count: int
    items: Annotated[list[str], operator.add]


def _bump(state: State) -> dict:
    return {"count": state["count"] + 1, "items": [f"step-{state['count'] + 1}"]}


def _graph(saver, steps: int = 1):
    builder = StateGraph(State)
    previous = START
    for i in range(steps):
        builder.add_node(f"n{i}", _bump)
        builder.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=saver)


def _config(tid: str) -> dict:
    return {"configurable": {"thread_id": tid}}


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "journal")


async def test_sync_methods_from_a_worker_thread(root):
    async with Journal.open(root) as journal:
        saver = JournalSaver(journal)
        tid = str(uuid.uuid4())

        def work() -> None:
            config = generate_config(tid)
            first = saver.put(config, generate_checkpoint(), generate_metadata(), {})
            saver.put_writes(first, [("ch", "v")], "task-1")
            second = saver.put(
                first, generate_checkpoint(), generate_metadata(run_id="r2"), {}
            )
            got = saver.get_tuple(generate_config(tid))
            assert got is not None
            assert got.config == second
            assert [t.config for t in saver.list(generate_config(tid))] == [
                second,
                first,
            ]
            assert saver.get_tuple(first).pending_writes == [("task-1", "ch", "v")]
            saver.copy_thread(tid, tid + "-copy")
            assert len(list(saver.list(generate_config(tid + "-copy")))) == 2
            saver.delete_for_runs(["r2"])
            assert [t.config for t in saver.list(generate_config(tid))] == [first]
            saver.put(first, generate_checkpoint(), generate_metadata(), {})
            saver.prune([tid])
            assert len(list(saver.list(generate_config(tid)))) == 1
            saver.delete_thread(tid)
            assert saver.get_tuple(generate_config(tid)) is None

        await asyncio.to_thread(work)
        await saver.aclose()


async def test_sync_method_on_the_loop_thread_is_refused(root):
    async with Journal.open(root) as journal:
        saver = JournalSaver(journal)
        with pytest.raises(RuntimeError, match="own event loop"):
            saver.get_tuple(generate_config("t"))


def test_sync_methods_need_a_loop(tmp_path):
    saver = JournalSaver(Journal.open(str(tmp_path / "j")))
    with pytest.raises(RuntimeError, match="running loop"):
        saver.get_tuple(generate_config("t"))


async def test_sync_graph_in_a_thread_and_async_graph_share_a_thread(root):
    async with Journal.open(root) as journal:
        saver = JournalSaver(journal)
        graph = _graph(saver, steps=2)
        init = {"big": "x", "count": 0, "items": []}
        out = await asyncio.to_thread(graph.invoke, init, _config("g"))
        assert out["count"] == 2
        out = await graph.ainvoke({"items": ["more"]}, _config("g"))
        assert out["count"] == 4
        assert out["items"] == ["step-1", "step-2", "more", "step-3", "step-4"]
        await saver.aclose()
    # Another saver (another process) resumes the thread from the journal.
    async with Journal.open(root) as journal:
        saver = JournalSaver(journal)
        state = await _graph(saver).aget_state(_config("g"))
        assert state.values["count"] == 4
        await saver.aclose()


async def test_a_step_stores_only_what_it_changed(root):
    big = "B" * 50_000
    async with Journal.open(root) as journal:
        saver = JournalSaver(journal)
        graph = _graph(saver, steps=10)
        out = await graph.ainvoke({"big": big, "count": 0, "items": []}, _config("d"))
        assert out["count"] == 10
        assert out["big"] == big
        await saver.aclose()
        key = ThreadKey(agent_id="langgraph", session_id="d")
        stored: dict[str, int] = {}
        deltas: dict[str, int] = {}
        checkpoints = 0
        async for record in journal.records(key):
            for event in record.events:
                if isinstance(event, LangGraphCheckpointSaved):
                    checkpoints += 1
                    for value in event.values:
                        stored[value.channel] = stored.get(value.channel, 0) + 1
                        if value.base is not None:
                            deltas[value.channel] = deltas.get(value.channel, 0) + 1
        assert checkpoints >= 11
        # The big channel was written once; every step stored its counter.
        assert stored["big"] == 1
        assert stored["count"] >= 10
        # The growing list was stored as what each step appended to it.
        assert deltas["items"] >= 5
        # Each checkpoint still rebuilds every value from the records that hold it,
        # in this saver and in a fresh one (another process).
        fresh = _graph(JournalSaver(journal), steps=10)
        for g in (graph, fresh):
            history = [s async for s in g.aget_state_history(_config("d"))]
            for snap in history:
                count = snap.values.get("count")
                if count:
                    assert snap.values["big"] == big
                    assert snap.values["items"] == [
                        f"step-{i}" for i in range(1, count + 1)
                    ]


async def test_a_writer_taken_over_is_fenced_in_langgraph_terms(root):
    async with Journal.open(root) as j1, Journal.open(root) as j2:
        first = JournalSaver(j1, holder="node-a")
        tid = "fence"
        stored = await first.aput(
            generate_config(tid), generate_checkpoint(), generate_metadata(), {}
        )
        # A restart of node-a (same holder id) takes the lease over.
        second = JournalSaver(j2, holder="node-a")
        newer = await second.aput(
            stored, generate_checkpoint(), generate_metadata(), {}
        )
        with pytest.raises(CheckpointFencedError) as info:
            await first.aput(stored, generate_checkpoint(), generate_metadata(), {})
        assert isinstance(info.value.__cause__, FencedError)
        latest = await second.aget_tuple(generate_config(tid))
        assert latest.config == newer
        await first.aclose()
        await second.aclose()


async def test_a_lease_held_elsewhere_is_refused_or_waited_for(root):
    async with Journal.open(root) as j1, Journal.open(root) as j2:
        first = JournalSaver(j1, holder="node-a")
        await first.aput(
            generate_config("held"), generate_checkpoint(), generate_metadata(), {}
        )
        other = JournalSaver(j2, holder="node-b")
        with pytest.raises(CheckpointLeaseHeldError):
            await other.aput(
                generate_config("held"), generate_checkpoint(), generate_metadata(), {}
            )
        waiting = JournalSaver(j2, holder="node-c", lease_wait=30.0)
        put = asyncio.ensure_future(
            waiting.aput(
                generate_config("held"), generate_checkpoint(), generate_metadata(), {}
            )
        )
        await first.release("held")
        await put
        assert len([t async for t in waiting.alist(generate_config("held"))]) == 2
        await waiting.aclose()
        await first.aclose()


async def test_hold_spans_a_run(root):
    async with Journal.open(root) as j1, Journal.open(root) as j2:
        first = JournalSaver(j1, holder="node-a", keep=False)
        graph = _graph(first)
        async with first.hold("h"):
            await graph.ainvoke({"big": "", "count": 0, "items": []}, _config("h"))
            other = JournalSaver(j2, holder="node-b", keep=False)
            with pytest.raises(CheckpointLeaseHeldError):
                async with other.hold("h"):
                    pass
        # Released at the end of the span: the other process takes its turn.
        async with other.hold("h"):
            out = await _graph(other).ainvoke({"items": ["b"]}, _config("h"))
        assert out["count"] == 2


def _extend(state, writes):
    out = list(state or [])
    for write in writes:
        out.extend(write)
    return out


class DeltaState(TypedDict):
    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=3)]


def _delta_graph(saver):
    builder = StateGraph(DeltaState).add_node("a", lambda s: {"items": ["x"]})
    builder.add_edge(START, "a").add_edge("a", END)
    return builder.compile(checkpointer=saver)


async def test_delta_channels_rebuild_after_a_restart_and_a_prune(root):
    async with Journal.open(root) as journal:
        saver = JournalSaver(journal)
        graph = _delta_graph(saver)
        for i in range(7):
            out = await graph.ainvoke({"items": [f"in{i}"]}, _config("dc"))
        assert len(out["items"]) == 14
        await saver.aclose()
    async with Journal.open(root) as journal:
        saver = JournalSaver(journal)
        graph = _delta_graph(saver)
        assert (await graph.aget_state(_config("dc"))).values["items"] == out["items"]
        history = await saver.aget_delta_channel_history(
            config=_config("dc"), channels=["items"]
        )
        assert history["items"]["writes"]
        before = len([t async for t in saver.alist(_config("dc"))])
        await saver.aprune(["dc"])
        after = len([t async for t in saver.alist(_config("dc"))])
        # The snapshot ancestors the delta channel needs survive the prune.
        assert 1 < after < before
        assert (await graph.aget_state(_config("dc"))).values["items"] == out["items"]
        await saver.aclose()
