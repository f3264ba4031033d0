"""JournalSaver beyond the conformance kit: sync twins, graphs, deltas, leases."""

from __future__ import annotations

import asyncio
import operator
import shutil
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
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


class ForkState(TypedDict):
    notes: Annotated[list[str], operator.add]
    last: str


def _note(state: ForkState) -> dict:
    return {"notes": [f"saw:{state['last']}"], "last": state["last"]}


def _fork_graph(saver):
    builder = StateGraph(ForkState).add_node("note", _note)
    builder.add_edge(START, "note").add_edge("note", END)
    return builder.compile(checkpointer=saver)


async def _history(graph, config) -> list[dict]:
    return [snap.values async for snap in graph.aget_state_history(config)]


async def _branch(graph, config) -> list[dict]:
    """The values of a checkpoint and of each of its ancestors, newest first."""
    values = []
    while config is not None:
        snap = await graph.aget_state(config)
        values.append(snap.values)
        config = snap.parent_config
    return values


async def _fork(main_saver, fork_saver) -> dict[str, list[dict]]:
    """Two runs, then a third from the end of the first (time travel) in fork_saver.

    Returns every checkpoint's values of the main branch before and after the fork,
    and of the fork.
    """
    main, fork = _fork_graph(main_saver), _fork_graph(fork_saver)
    await main.ainvoke({"notes": ["a"], "last": "A"}, _config("f"))
    after_first = (await main.aget_state(_config("f"))).config
    await main.ainvoke({"notes": ["b"], "last": "B"}, _config("f"))
    main_head = (await main.aget_state(_config("f"))).config
    before = await _branch(main, main_head)
    await fork.ainvoke({"notes": ["X"], "last": "X"}, after_first)
    fork_head = (await fork.aget_state(_config("f"))).config
    return {
        "main before the fork": before,
        "main after the fork": await _branch(main, main_head),
        "fork": await _branch(main, fork_head),
    }


@pytest.mark.parametrize("fork_in", ["the same saver", "another process"])
async def test_a_fork_leaves_the_other_branch_values_alone(root, fork_in):
    expected = await _fork(saver := InMemorySaver(), saver)
    assert expected["main before the fork"] == expected["main after the fork"]
    async with Journal.open(root) as j1, Journal.open(root) as j2:
        first = JournalSaver(j1, holder="node-a", keep=False)
        # Another process runs without hold(): it forks from the checkpoint it read.
        other = (
            first
            if fork_in == "the same saver"
            else JournalSaver(j2, holder="node-b", keep=False)
        )
        got = await _fork(first, other)
        assert got == expected
        # A fresh saver (a restart) rebuilds both branches from the records.
        again = _fork_graph(JournalSaver(j1, keep=False))
        assert await _history(again, _config("f")) == await _history(
            _fork_graph(saver), _config("f")
        )


# A journal written by JournalSaver before its versions were unique (integer channel
# versions): two runs of _fork_graph on thread "t", {"notes": ["a"], "last": "A"}
# then {"notes": ["b"], "last": "B"}.
INT_VERSIONS_JOURNAL = Path(__file__).parent / "langgraph_int_versions_journal"
INT_VERSIONS_HISTORY = [
    {"notes": ["a", "saw:A", "b", "saw:B"], "last": "B"},
    {"notes": ["a", "saw:A", "b"], "last": "B"},
    {"notes": ["a", "saw:A"], "last": "A"},
    {"notes": ["a", "saw:A"], "last": "A"},
    {"notes": ["a"], "last": "A"},
    {"notes": []},
]


async def _continue_and_fork(graph) -> dict:
    """A third run on the thread, then two forks from the end of its first run.

    Returns the main branch's head.
    """
    await graph.ainvoke({"notes": ["c"], "last": "C"}, _config("t"))
    history = [s.config async for s in graph.aget_state_history(_config("t"))]
    await graph.ainvoke({"notes": ["X"], "last": "X"}, history[-3])
    await graph.ainvoke({"notes": ["Y"], "last": "Y"}, history[-3])
    return history[0]


async def test_a_journal_with_integer_versions_loads_continues_and_forks(tmp_path):
    root = tmp_path / "journal"
    shutil.copytree(INT_VERSIONS_JOURNAL, root)
    expected = _fork_graph(InMemorySaver())
    await expected.ainvoke({"notes": ["a"], "last": "A"}, _config("t"))
    await expected.ainvoke({"notes": ["b"], "last": "B"}, _config("t"))
    assert await _history(expected, _config("t")) == INT_VERSIONS_HISTORY
    async with Journal.open(str(root)) as journal:
        saver = JournalSaver(journal)
        graph = _fork_graph(saver)
        # Every checkpoint loads the values it was written with, also copied.
        assert await _history(graph, _config("t")) == INT_VERSIONS_HISTORY
        await saver.acopy_thread("t", "t-copy")
        assert await _history(graph, _config("t-copy")) == INT_VERSIONS_HISTORY
        # The old checkpoints continue (their versions order with the new ones) and
        # fork without touching the main branch.
        expected_head = await _continue_and_fork(expected)
        head = await _continue_and_fork(graph)
        assert await _history(graph, _config("t")) == await _history(
            expected, _config("t")
        )
        assert await _branch(graph, head) == await _branch(expected, expected_head)
        assert (await graph.aget_state(head)).values == {
            "notes": ["a", "saw:A", "b", "saw:B", "c", "saw:C"],
            "last": "C",
        }
        # A checkpoint never mixes version types (LangGraph compares them).
        async for tup in saver.alist(_config("t")):
            seen = tup.checkpoint["versions_seen"].values()
            versions = [*tup.checkpoint["channel_versions"].values()]
            versions += [v for node in seen for v in node.values()]
            assert all(isinstance(v, str) for v in versions), versions
        await saver.aclose()


def _typed(value):
    """The value with each leaf's type beside it: 1, 1.0 and True compare equal."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


class PlainListState(TypedDict, total=False):
    q: str
    scores: list
    flags: list


def _as_ints(state: PlainListState) -> dict:
    return {"scores": [1, 0, 2, 3, 4, 5, 6, 7, 8, 9], "flags": [1, 0, 1, 1, 0, 0, 1]}


def _as_floats_and_bools(state: PlainListState) -> dict:
    # Equal under ==, not once serialized: each list only looks like it grew.
    return {
        "scores": [float(x) for x in state["scores"]] + [0.5],
        "flags": [bool(x) for x in state["flags"]] + [True],
    }


def _append_more(state: PlainListState) -> dict:
    return {"scores": [*state["scores"], 0.25], "flags": [*state["flags"], False]}


def _chain_graph(saver, state, *steps):
    builder = StateGraph(state)
    previous = START
    for step in steps:
        builder.add_node(step.__name__, step)
        builder.add_edge(previous, step.__name__)
        previous = step.__name__
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=saver)


def _list_deltas(records, channel: str) -> list[bool]:
    """Per stored value of ``channel``, in order: whether it was a delta."""
    return [
        value.base is not None
        for record in records
        for event in record.events
        if isinstance(event, LangGraphCheckpointSaved)
        for value in event.values
        if value.channel == channel and value.type != "empty"
    ]


async def test_a_list_whose_items_change_type_reads_back_as_in_memory_saver(root):
    steps = (_as_ints, _as_floats_and_bools, _append_more)
    expected = _chain_graph(InMemorySaver(), PlainListState, *steps)
    await expected.ainvoke({"q": "go"}, _config("types"))
    want = _typed(await _history(expected, _config("types")))
    assert want[0]["scores"][:2] == [("float", 1.0), ("float", 0.0)]
    assert want[0]["flags"][:2] == [("bool", True), ("bool", False)]
    async with Journal.open(root) as journal:
        records = await _matching_records(
            journal, PlainListState, steps, {"q": "go"}, "types", want
        )
        # The retyped lists were stored whole; what was only appended, as a delta.
        assert _list_deltas(records, "scores") == [False, False, True]


async def _matching_records(
    journal: Journal,
    state: Any,
    steps: Any,
    given: Any,
    thread: str,
    want: Any,
    **invoke: Any,
) -> list[Any]:
    """Run the graph on a JournalSaver: its history, and a fresh saver's, must be
    ``want`` (InMemorySaver's). Returns the thread's records."""
    saver = JournalSaver(journal)
    graph = _chain_graph(saver, state, *steps)
    await graph.ainvoke(given, _config(thread), **invoke)
    assert _typed(await _history(graph, _config(thread))) == want
    fresh = _chain_graph(JournalSaver(journal), state, *steps)
    assert _typed(await _history(fresh, _config(thread))) == want
    await saver.aclose()
    key = ThreadKey(agent_id="langgraph", session_id=thread)
    return [r async for r in journal.records(key)]


class LogState(TypedDict):
    log: Annotated[list[dict], operator.add]


def _start(state: LogState) -> dict:
    return {"log": [{"step": i, "status": "running"} for i in range(1, 4)]}


def _finish(state: LogState) -> dict:
    for entry in state["log"]:
        entry["status"] = "done"  # an in-place edit of items stored before
    return {"log": [{"step": 4, "status": "done"}]}


def _add(state: LogState) -> dict:
    return {"log": [{"step": 5, "status": "done"}]}


def _log_input() -> dict:
    # Big enough that the steps after it stay deltas until one edits an item.
    return {"log": [{"step": 0, "status": "input", "pad": "y" * 2000}]}


async def test_list_items_edited_in_place_read_back_edited(root):
    steps = (_start, _finish, _add)
    expected = _chain_graph(InMemorySaver(), LogState, *steps)
    # A new input each run: LangGraph hands the input's items to the nodes.
    await expected.ainvoke(_log_input(), _config("edit"), durability="sync")
    want = _typed(await _history(expected, _config("edit")))
    assert [e["status"] for e in want[0]["log"]] == [("str", "done")] * 6
    async with Journal.open(root) as journal:
        records = await _matching_records(
            journal, LogState, steps, _log_input(), "edit", want, durability="sync"
        )
        # input, start, finish (edited: whole), add (only appended: a delta)
        assert _list_deltas(records, "log")[-2:] == [False, True]


async def test_a_checkpoint_is_stored_as_it_was_when_aput_was_called(root):
    # LangGraph's async durability saves a checkpoint while the next step runs,
    # and a step may edit in place the values the checkpoint holds: aput must
    # take them as they were when it was called (InMemorySaver does, serializing
    # before it yields), not as they are once it holds the lease, here after
    # waiting for another holder's.
    async with Journal.open(root) as journal:
        saver = JournalSaver(journal, lease_wait=30.0, keep=False)
        key = ThreadKey(agent_id="langgraph", session_id="taken")
        cfg = _config("taken")
        stored = []
        version = None
        for step in range(3):
            checkpoint = empty_checkpoint()
            log = [
                {"step": 0, "status": "running"},
                *({"step": s} for s in range(step)),
            ]
            version = saver.get_next_version(version, None)
            checkpoint["channel_values"] = {"log": log, "note": {"text": "as called"}}
            checkpoint["channel_versions"] = {"log": version, "note": version}
            other = await journal.acquire(key, holder="other")
            saving = asyncio.create_task(
                saver.aput(
                    cfg, checkpoint, {"step": step}, {"log": version, "note": version}
                )
            )
            await asyncio.sleep(0.05)
            assert not saving.done()  # waiting for the other holder's lease
            log[0]["status"] = "edited later"
            checkpoint["channel_values"]["note"]["text"] = "edited later"
            await other.close()
            cfg = await saving
            stored.append(cfg)
        for step, config in enumerate(stored):
            for each in (saver, JournalSaver(journal)):
                values = (await each.aget_tuple(config)).checkpoint["channel_values"]
                assert values["log"][0]["status"] == "running", step
                assert values["note"]["text"] == "as called", step
                assert len(values["log"]) == step + 1
        records = [r async for r in journal.records(key)]
        # The later steps' lists only grew on the one before: stored as deltas.
        assert _list_deltas(records, "log") == [False, True, True]
