"""LangGraph checkpointers: the checkpoint a ``StateGraph`` writes at the end of a turn.

The graph this stands for is the usual tool-calling agent: a state with a
``messages: Annotated[list, add_messages]`` channel (``MessagesState``) plus side-state
channels ``todos``, ``summary`` and ``plan_mode``, nodes ``agent`` and ``tools``. One
turn is one ``invoke`` with ``durability="exit"``, the cheapest mode: the Pregel loop
then calls ``put`` once per invoke with the final checkpoint (no ``put_writes``), its
parent config being the previous checkpoint. A probe of the real loop shows that
checkpoint: ``channel_values`` holds the whole message list and the side-state values,
``channel_versions`` bumps ``__start__``, ``messages``, ``branch:to:agent``,
``branch:to:tools`` (and each side-state channel written this turn), and
``new_versions`` passes exactly the bumped channels. The default durability
(``"async"``) would write one checkpoint per super-step (five for this turn shape)
plus four ``put_writes``: these numbers are LangGraph's lower bound.

``add_messages`` keeps a plain list, so every checkpoint holds (and each saver
serializes) the entire conversation so far: a put costs O(length of the thread) and
a thread's storage grows O(turns²) (``DeltaChannel``, which would avoid that, is
documented as beta and is not the ``MessagesState`` default).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    create_checkpoint,
    empty_checkpoint,
)
from langgraph.checkpoint.memory import InMemorySaver

try:
    from langgraph.checkpoint.sqlite import SqliteSaver
except ImportError:  # reported by bench_peers when the variant is selected
    SqliteSaver = None  # type: ignore[assignment,misc]
try:
    from langgraph.checkpoint.postgres import PostgresSaver
except ImportError:
    PostgresSaver = None  # type: ignore[assignment,misc]

# Imported here, not in child_load's timed open, like every peer's library.
try:
    from journal import Journal
    from journal.adapters.langgraph import JournalSaver
except ImportError:  # reported when the variant is selected
    pass

from _peers.base import Adapter, du
from _peers.workload import Turn, make_turn, side_state_at

if TYPE_CHECKING:
    from pathlib import Path

FLOW_CHANNELS = ("__start__", "messages", "branch:to:agent", "branch:to:tools")


def messages(t: Turn) -> list[Any]:
    return [
        HumanMessage(content=t.user, id=str(uuid.uuid4())),
        AIMessage(
            content=t.preamble,
            tool_calls=[
                {"name": t.tool, "args": t.args, "id": t.call_id, "type": "tool_call"}
            ],
            id=str(uuid.uuid4()),
        ),
        ToolMessage(
            content=t.result, tool_call_id=t.call_id, name=t.tool, id=str(uuid.uuid4())
        ),
        AIMessage(content=t.answer, id=str(uuid.uuid4())),
    ]


def side_channels(t: Turn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t.todos is not None:
        out["todos"] = t.todos
    if t.summary is not None:
        out["summary"] = t.summary
    if t.plan_mode is not None:
        out["plan_mode"] = {"active": t.plan_mode, "plan_file": t.plan_file}
    return out


def thread_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


class LangGraphPeer(Adapter):
    system = "LangGraph"
    module = "langgraph_peer"

    def __init__(
        self, kind: str, *, path: Path | None = None, server: Any = None
    ) -> None:
        self.kind = kind
        self.path = path
        self.server = server
        self.database = "lg_checkpoints"
        variant = {
            "memory": "InMemorySaver",
            "sqlite": "SqliteSaver (file)",
            "sqlite-normal": "SqliteSaver (file, synchronous=NORMAL)",
            "postgres": "PostgresSaver",
            "journal": "agent-journal JournalSaver (file)",
        }[kind]
        super().__init__(variant, "")
        self.persistent = kind != "memory"
        if kind == "sqlite-normal":
            self.durable = "not durable"
        self.stack = contextlib.ExitStack()

    async def open(self) -> None:
        if self.kind == "memory":
            self.saver: BaseCheckpointSaver[Any] = InMemorySaver()
            self.durability = "in memory (serialized blobs in a dict): nothing survives"
        elif self.kind in ("sqlite", "sqlite-normal"):
            assert SqliteSaver is not None, "langgraph-checkpoint-sqlite is missing"
            assert self.path is not None
            self.path.mkdir(parents=True, exist_ok=True)
            self.saver = self.stack.enter_context(
                SqliteSaver.from_conn_string(str(self.path / "checkpoints.sqlite"))
            )
            self.saver.setup()
            if self.kind == "sqlite-normal":
                self.saver.conn.execute("PRAGMA synchronous=NORMAL")
            mode = self.saver.conn.execute("PRAGMA journal_mode").fetchone()[0]
            sync = self.saver.conn.execute("PRAGMA synchronous").fetchone()[0]
            if self.kind == "sqlite":
                self.durability = (
                    f"default: journal_mode={mode} (SqliteSaver sets WAL), "
                    f"synchronous={_SYNC.get(sync, sync)} (sqlite3's default, left "
                    "as is): each commit fsyncs the WAL"
                )
            else:
                self.durability = (
                    f"journal_mode={mode}, synchronous={_SYNC.get(sync, sync)} set on "
                    "the connection given to SqliteSaver: commits are not fsynced "
                    "(the WAL is, at its checkpoints); survives a process crash, "
                    "not a power loss"
                )
        elif self.kind == "journal":
            assert self.path is not None
            self.journal = Journal.open(str(self.path))
            self.saver = JournalSaver(self.journal)
            self.durability = (
                "default: each put is one journal record, fsynced before it returns; "
                "a growing messages list is stored as the messages it appended"
            )
        else:
            assert PostgresSaver is not None, "langgraph-checkpoint-postgres is missing"
            self.server.create_database(self.database)
            self.saver = self.stack.enter_context(
                PostgresSaver.from_conn_string(self.server.dsn(self.database))
            )
            self.saver.setup()
            self.durability = "server defaults (see PostgreSQL below)"
        self._start_thread(f"thread-{uuid.uuid4().hex[:8]}", [], {})

    def _start_thread(
        self, thread_id: str, history: list[Any], side: dict[str, Any]
    ) -> None:
        self.thread_id = thread_id
        self.config = thread_config(thread_id)
        self.messages = history
        self.side = side
        self.versions: dict[str, Any] = {}
        self.step = -1

    def _put(self, new_messages: list[Any], side: dict[str, Any]) -> None:
        self.config = self.saver.put(self.config, *self._next(new_messages, side))

    async def _aput(self, new_messages: list[Any], side: dict[str, Any]) -> None:
        """The journal saver's put: its async method, on this loop."""
        self.config = await self.saver.aput(
            self.config, *self._next(new_messages, side)
        )

    def _next(
        self, new_messages: list[Any], side: dict[str, Any]
    ) -> tuple[Checkpoint, Any, dict[str, Any]]:
        """The checkpoint, metadata and new versions of the next put."""
        saver = self.saver
        self.messages = self.messages + new_messages  # add_messages returns a new list
        self.side.update(side)
        updated = [*FLOW_CHANNELS, *side]
        for channel in updated:
            self.versions[channel] = saver.get_next_version(
                self.versions.get(channel), None
            )
        self.step += 5  # input, agent, tools, agent: the loop's step counter
        v = self.versions
        template: Checkpoint = {
            **empty_checkpoint(),
            "channel_values": {"messages": self.messages, **self.side},
            "channel_versions": dict(v),
            "versions_seen": {
                "__input__": {},
                "__start__": {"__start__": v["__start__"]},
                "agent": {"branch:to:agent": v["branch:to:agent"]},
                "tools": {"branch:to:tools": v["branch:to:tools"]},
            },
        }
        checkpoint = create_checkpoint(template, None, self.step)
        return (
            checkpoint,
            {"source": "loop", "step": self.step, "parents": {}},
            {channel: v[channel] for channel in updated},
        )

    async def put_turn(self, turn: Turn) -> None:
        if self.kind == "journal":
            await self._aput(messages(turn), side_channels(turn))
        else:
            self._put(messages(turn), side_channels(turn))
        self.turns += 1

    async def seed(self, n_turns: int) -> bool:
        """A new thread whose first checkpoint already holds ``n_turns`` turns.

        Filling a LangGraph thread to thousands of turns for real writes the whole
        conversation again at every turn (about 30 GB for 5,000 turns of this
        workload), so the longest length starts from a single checkpoint holding the
        history, as if older checkpoints had been pruned. A put and a load only
        touch the newest checkpoint, so this measures them at that length.
        """
        history: list[Any] = []
        for i in range(n_turns):
            history += messages(make_turn(i))
        state = side_state_at(n_turns)
        side = {
            "todos": state["todos"],
            "plan_mode": {"active": state["plan_mode"], "plan_file": None},
        }
        if state["summary"] is not None:
            side["summary"] = state["summary"]
        self._start_thread(f"seeded-{n_turns}-{uuid.uuid4().hex[:8]}", [], {})
        if self.kind == "journal":
            await self._aput(history, side)
        else:
            self._put(history, side)
        self.turns = n_turns
        return True

    async def load(self) -> int:
        if self.kind == "journal":
            found = await self.saver.aget_tuple(thread_config(self.thread_id))
            assert found is not None
            return len(found.checkpoint["channel_values"]["messages"])
        found = self.saver.get_tuple(thread_config(self.thread_id))
        assert found is not None
        return len(found.checkpoint["channel_values"]["messages"])

    def footprint(self) -> tuple[int, int] | None:
        if self.kind.startswith("sqlite") or self.kind == "journal":
            assert self.path is not None
            return du(self.path)
        if self.kind == "postgres":
            return self.server.footprint(self.database)
        return None

    def loader_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"kind": self.kind, "thread_id": self.thread_id}
        if self.kind.startswith("sqlite"):
            spec["db"] = str(self.path / "checkpoints.sqlite")  # type: ignore[operator]
        elif self.kind == "journal":
            spec["root"] = str(self.path)
        elif self.kind == "postgres":
            spec["dsn"] = self.server.dsn(self.database)
        return spec

    async def close(self) -> None:
        if self.kind == "journal":
            await self.saver.aclose()
            await self.journal.aclose()
        self.stack.close()


_SYNC = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


async def child_load(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["kind"] == "journal":
        t0 = time.perf_counter()
        journal = Journal.open(spec["root"])
        saver = JournalSaver(journal)
        t1 = time.perf_counter()
        got = await saver.aget_tuple(thread_config(spec["thread_id"]))
        t2 = time.perf_counter()
        await journal.aclose()
        assert got is not None
        count = len(got.checkpoint["channel_values"]["messages"])
        return {"open_s": t1 - t0, "load_s": t2 - t1, "items": count}
    with contextlib.ExitStack() as stack:
        t0 = time.perf_counter()
        if spec["kind"].startswith("sqlite"):
            conn = stack.enter_context(
                contextlib.closing(sqlite3.connect(spec["db"], check_same_thread=False))
            )
            saver: BaseCheckpointSaver[Any] = SqliteSaver(conn)
        else:
            saver = stack.enter_context(PostgresSaver.from_conn_string(spec["dsn"]))
        t1 = time.perf_counter()
        found = saver.get_tuple(thread_config(spec["thread_id"]))
        t2 = time.perf_counter()
    assert found is not None
    items = len(found.checkpoint["channel_values"]["messages"])
    return {"open_s": t1 - t0, "load_s": t2 - t1, "items": items}
