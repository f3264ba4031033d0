"""One process writing through an adapter, for the two-writer and crash tests.

``python _child.py MODE ROOT ID N NAME`` prints ``ack <what>`` after each commit.
``*-crash`` modes exit abruptly (``os._exit``) in the middle of a step, holding
the lease, after N acknowledged commits.
"""

from __future__ import annotations

import asyncio
import operator
import os
import sys
from typing import Annotated, TypedDict

from journal import Journal

CRASH_TTL = 2.0


def ack(what: str) -> None:
    print(f"ack {what}", flush=True)


class Steps(TypedDict):
    items: Annotated[list[str], operator.add]
    steps: Annotated[int, operator.add]


def _graph(saver, nodes: int, crash_at: int | None):
    from langgraph.graph import END, START, StateGraph

    def node(i: int):
        def run(state: Steps) -> dict:
            if i == crash_at:
                os._exit(3)
            return {"items": [f"n{i}"], "steps": 1}

        return run

    builder = StateGraph(Steps)
    previous = START
    for i in range(nodes):
        builder.add_node(f"n{i}", node(i))
        builder.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=saver)


async def langgraph_turns(journal: Journal, tid: str, n: int, name: str) -> None:
    from journal.adapters.langgraph import JournalSaver

    saver = JournalSaver(journal, keep=False, lease_wait=60.0)
    graph = _graph(saver, 1, None)
    config = {"configurable": {"thread_id": tid}}
    for i in range(n):
        async with saver.hold(tid):
            await graph.ainvoke({"items": [f"{name}-{i}"], "steps": 0}, config)
        ack(f"{name}-{i}")


async def langgraph_crash(journal: Journal, tid: str, n: int, name: str) -> None:
    from journal.adapters.langgraph import JournalSaver

    resume = name == "resume"
    saver = JournalSaver(journal, lease_ttl=CRASH_TTL, lease_wait=60.0)
    graph = _graph(saver, 5, None if resume else n)
    config = {"configurable": {"thread_id": tid}}
    # "sync" durability: each step's checkpoint is committed before the next runs
    # (the default "async" overlaps them, so a crash may lose the newest).
    start = None if resume else {"items": [], "steps": 0}
    out = await graph.ainvoke(start, config, durability="sync")
    ack(",".join(out["items"]))
    await saver.aclose()


async def agents_turns(journal: Journal, sid: str, n: int, name: str) -> None:
    from journal.adapters.openai_agents import JournalSession

    session = JournalSession(sid, journal, lease_wait=60.0)
    for i in range(n):
        await session.add_items([{"role": "user", "content": f"{name}-{i}"}])
        ack(f"{name}-{i}")


async def agents_crash(journal: Journal, sid: str, n: int, name: str) -> None:
    from journal.adapters.openai_agents import JournalSession

    session = JournalSession(sid, journal, keep=True, lease_ttl=CRASH_TTL)
    for i in range(n):
        await session.add_items([{"role": "user", "content": f"{name}-{i}"}])
        ack(f"{name}-{i}")
    # Mid-step: the next write is being prepared when the process dies.
    os._exit(3)


async def pydantic_ai_turns(journal: Journal, cid: str, n: int, name: str) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import ConversationConflict
    from pydantic_ai.models.test import TestModel

    from journal.adapters.pydantic_ai import JournalConversationStore

    store = JournalConversationStore(journal, lease_wait=60.0)
    agent = Agent(TestModel(custom_output_text="ok"))
    for i in range(n):
        while True:
            loaded = await store.load(cid)
            conversation = loaded or Conversation(conversation_id=cid)
            result = await agent.run(f"{name}-{i}", conversation=conversation)
            try:
                await store.save(result)
            except ConversationConflict:
                continue  # another process saved first: load again and redo
            break
        ack(f"{name}-{i}")


async def pydantic_ai_crash(journal: Journal, cid: str, n: int, name: str) -> None:
    await pydantic_ai_turns(journal, cid, n, name)
    os._exit(3)


def _pause() -> None:
    """Block the whole process (its event loop too) until the parent writes a line.

    Like a process stopped or stalled past its lease: renewals stop, the lease
    expires, another process takes the thread over.
    """
    ack("paused")
    sys.stdin.readline()


async def langgraph_zombie(journal: Journal, tid: str, n: int, name: str) -> None:
    from langgraph.checkpoint.conformance.test_utils import (
        generate_checkpoint,
        generate_config,
        generate_metadata,
    )

    from journal.adapters.langgraph import CheckpointFencedError, JournalSaver

    saver = JournalSaver(journal, holder=name, lease_ttl=CRASH_TTL)
    config = await saver.aput(
        generate_config(tid), generate_checkpoint(), generate_metadata(), {}
    )
    _pause()
    try:
        await saver.aput(config, generate_checkpoint(), generate_metadata(), {})
    except CheckpointFencedError:
        ack("fenced")
        os._exit(4)
    ack("wrote")


async def agents_zombie(journal: Journal, sid: str, n: int, name: str) -> None:
    from journal.adapters.openai_agents import JournalSession, SessionConflictError

    session = JournalSession(sid, journal, holder=name, keep=True, lease_ttl=CRASH_TTL)
    await session.add_items([{"role": "user", "content": "before"}])
    _pause()
    try:
        await session.add_items([{"role": "user", "content": "zombie"}])
    except SessionConflictError:
        ack("fenced")
        os._exit(4)
    ack("wrote")


MODES = {
    "langgraph-zombie": langgraph_zombie,
    "agents-zombie": agents_zombie,
    "langgraph-turns": langgraph_turns,
    "langgraph-crash": langgraph_crash,
    "agents-turns": agents_turns,
    "agents-crash": agents_crash,
    "pydantic-ai-turns": pydantic_ai_turns,
    "pydantic-ai-crash": pydantic_ai_crash,
}


async def main(mode: str, root: str, ident: str, n: int, name: str) -> None:
    async with Journal.open(root) as journal:
        await MODES[mode](journal, ident, n, name)


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    )
