"""On an encrypting journal, a queued turn's input is encrypted too.

Before, the durable index stored a submitted turn's messages as plain JSON even
when the journal encrypted everything else: the user's input sat in the clear in
the store (and in its backups and old object versions, which crypto-shredding is
there to cover) until a worker ran the turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from journal import Agent, Journal, KeyFile, RuntimeContext, ScriptedModel
from journal.durable import DurableClient, Worker

from ._support import PRIVATE_INPUT, files_holding

if TYPE_CHECKING:
    from pathlib import Path

ALICE = RuntimeContext(user_id="alice", session_id="s1")


async def test_a_queued_turns_input_is_encrypted_and_runs(tmp_path: Path) -> None:
    keys = KeyFile.create(tmp_path / "k.json")
    j = Journal.open(tmp_path / "j", encryption=keys)
    client = DurableClient(j, "a")
    turn = await client.submit(ALICE, PRIVATE_INPUT, turn_id="t1")
    assert files_holding(tmp_path / "j", PRIVATE_INPUT.encode()) == []
    assert files_holding(tmp_path / "j", b"4111") == []
    # Another process (its own keyring over the same keys) runs it.
    other = Journal.open(tmp_path / "j", encryption=KeyFile(tmp_path / "k.json"))
    agent = Agent("A", "a", ScriptedModel(["ok"]), journal=other)
    await Worker(agent, poll=0.01).drain()
    assert (await turn.result()).text == "ok"
    texts = [m.text for m in (await j.load(client.key(ALICE))).context]
    assert texts == [PRIVATE_INPUT, "ok"]
    assert files_holding(tmp_path / "j", PRIVATE_INPUT.encode()) == []
    await agent.close()
    await other.aclose()
    await j.aclose()


async def test_an_encrypted_input_moved_to_another_thread_is_not_run(
    tmp_path: Path,
) -> None:
    """The ciphertext is bound to its thread and turn id: a copy under another
    thread's queue does not decrypt there, and that turn fails instead of running
    someone else's input."""
    keys = KeyFile.create(tmp_path / "k.json")
    j = Journal.open(tmp_path / "j", encryption=keys)
    client = DurableClient(j, "a")
    await client.submit(ALICE, PRIVATE_INPUT, turn_id="t1")
    [entry] = list((tmp_path / "j").rglob("t000000000001.t1"))
    other = RuntimeContext(user_id="alice", session_id="s2")
    await client.submit(other, "other words", turn_id="t1")
    [target] = [
        p for p in (tmp_path / "j").rglob("t000000000001.t1") if "/s2/" in str(p)
    ]
    target.write_bytes(entry.read_bytes().replace(b'"s1"', b'"s2"'))
    agent = Agent("A", "a", ScriptedModel(["ok"] * 3), journal=j)
    await Worker(agent, poll=0.01).drain()
    texts = [m.text for m in (await j.load(client.key(other))).context]
    assert PRIVATE_INPUT not in texts
    with pytest.raises(Exception, match="cannot be read"):
        await client.turn(other, "t1").result()
    await agent.close()
    await j.aclose()
