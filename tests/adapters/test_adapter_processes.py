"""Two processes writing one thread through each adapter, and a crash mid-step.

Each child prints ``ack X`` after each commit; afterwards the thread, read through
the framework's own API, holds everything any child acknowledged, exactly once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("agents")
pytest.importorskip("pydantic_ai.conversation_store")

from journal import Journal

CHILD = Path(__file__).with_name("_child.py")
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120

pytestmark = pytest.mark.slow


def _spawn(mode: str, root: Path, ident: str, n: int, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(root), ident, str(n), name],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def _acks(proc: subprocess.Popen, code: int = 0) -> list[str]:
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == code, err[-3000:]
    return [
        line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("ack ")
    ]


def _race(mode: str, root: Path, ident: str, n: int) -> list[str]:
    procs = [_spawn(mode, root, ident, n, name) for name in ("a", "b")]
    acked = [a for p in procs for a in _acks(p)]
    assert len(acked) == 2 * n
    return acked


N = 6


async def test_two_processes_on_one_langgraph_thread(tmp_path):
    from journal.adapters.langgraph import JournalSaver

    acked = _race("langgraph-turns", tmp_path / "j", "t", N)
    async with Journal.open(str(tmp_path / "j")) as journal:
        saver = JournalSaver(journal)
        latest = await saver.aget_tuple({"configurable": {"thread_id": "t"}})
        values = latest.checkpoint["channel_values"]
        # Each run built on the one before it, whichever process ran it.
        assert sorted(i for i in values["items"] if i[0] in "ab") == sorted(acked)
        assert values["steps"] == 2 * N
        assert (await journal.verify(_key_of(journal, "langgraph", "t"))).ok


async def test_two_processes_on_one_agents_session(tmp_path):
    from journal.adapters.openai_agents import JournalSession

    acked = _race("agents-turns", tmp_path / "j", "s", N)
    async with Journal.open(str(tmp_path / "j")) as journal:
        items = await JournalSession("s", journal).get_items()
        assert sorted(i["content"] for i in items) == sorted(acked)


async def test_two_processes_on_one_pydantic_ai_conversation(tmp_path):
    from journal.adapters.pydantic_ai import JournalConversationStore

    acked = _race("pydantic-ai-turns", tmp_path / "j", "c", N)
    async with Journal.open(str(tmp_path / "j")) as journal:
        conversation = await JournalConversationStore(journal).load("c")
        prompts = [
            p.content
            for m in conversation.messages
            for p in m.parts
            if getattr(p, "part_kind", "") == "user-prompt"
        ]
        assert sorted(prompts) == sorted(acked)


async def test_langgraph_crash_mid_step_resumes_from_the_last_checkpoint(tmp_path):
    root = tmp_path / "j"
    crashed = _spawn("langgraph-crash", root, "t", 2, "crash")  # dies in node n2
    assert _acks(crashed, code=3) == []
    resumed = _acks(_spawn("langgraph-crash", root, "t", 0, "resume"))
    # n0 and n1 ran once, before the crash; the resumed run did n2..n4.
    assert resumed == ["n0,n1,n2,n3,n4"]


async def test_agents_crash_mid_step_keeps_every_acknowledged_item(tmp_path):
    from journal.adapters.openai_agents import JournalSession

    root = tmp_path / "j"
    acked = _acks(_spawn("agents-crash", root, "s", 3, "a"), code=3)
    # The next process waits out the dead one's lease and carries on.
    async with Journal.open(str(root)) as journal:
        session = JournalSession("s", journal, lease_wait=60.0)
        assert [i["content"] for i in await session.get_items()] == acked
        await session.add_items([{"role": "user", "content": "after"}])
        assert len(await session.get_items()) == 4


async def test_pydantic_ai_crash_keeps_every_acknowledged_turn(tmp_path):
    from journal.adapters.pydantic_ai import JournalConversationStore

    root = tmp_path / "j"
    acked = _acks(_spawn("pydantic-ai-crash", root, "c", 3, "a"), code=3)
    assert len(acked) == 3
    async with Journal.open(str(root)) as journal:
        store = JournalConversationStore(journal)
        conversation = await store.load("c")
        prompts = [
            p.content
            for m in conversation.messages
            for p in m.parts
            if getattr(p, "part_kind", "") == "user-prompt"
        ]
        assert prompts == acked


async def test_a_paused_langgraph_writer_is_fenced_by_the_next_process(tmp_path):
    from langgraph.checkpoint.conformance.test_utils import (
        generate_checkpoint,
        generate_config,
        generate_metadata,
    )

    from journal.adapters.langgraph import JournalSaver

    root = tmp_path / "j"
    zombie = _spawn("langgraph-zombie", root, "z", 0, "node-a")
    assert zombie.stdout.readline().strip() == "ack paused"
    async with Journal.open(str(root)) as journal:
        # Another node waits out the stalled one's lease and takes the thread over.
        saver = JournalSaver(journal, holder="node-b", lease_wait=60.0)
        first = await saver.aget_tuple(generate_config("z"))
        newer = await saver.aput(
            first.config, generate_checkpoint(), generate_metadata(), {}
        )
        await saver.aclose()
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        assert _acks(zombie, code=4) == ["fenced"]
        latest = await JournalSaver(journal).aget_tuple(generate_config("z"))
        assert latest.config == newer
        assert len([t async for t in saver.alist(generate_config("z"))]) == 2


async def test_a_paused_agents_writer_is_fenced_by_the_next_process(tmp_path):
    from journal.adapters.openai_agents import JournalSession

    root = tmp_path / "j"
    zombie = _spawn("agents-zombie", root, "z", 0, "node-a")
    assert zombie.stdout.readline().strip() == "ack paused"
    async with Journal.open(str(root)) as journal:
        session = JournalSession("z", journal, holder="node-b", lease_wait=60.0)
        await session.add_items([{"role": "user", "content": "after"}])
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        assert _acks(zombie, code=4) == ["fenced"]
        items = await JournalSession("z", journal).get_items()
        assert [i["content"] for i in items] == ["before", "after"]


def _key_of(journal, agent_id, session_id):
    from journal import ThreadKey

    return ThreadKey(agent_id=agent_id, session_id=session_id)
