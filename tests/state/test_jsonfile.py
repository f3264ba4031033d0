from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from journal.errors import CorruptRecordError, InvalidKeyError, StorageError
from journal.keys import encode_segment
from stores.state import JsonFileAgentStateStore
from stores.state.jsonfile import DEFAULT_STATE_HOME, STATE_HOME_ENV, default_root
from stores.testing.state_contract import (
    ENTRY,
    HOSTILE_IDS,
    AgentStateStoreContract,
    full_state,
)

if TYPE_CHECKING:
    from projections.agent_state import AgentState

REPO = Path(__file__).resolve().parents[2]


class TestJsonFileAgentStateStore(AgentStateStoreContract):
    @pytest.fixture
    async def state_store(self, tmp_path):
        store = JsonFileAgentStateStore(tmp_path / "state")
        yield store
        await store.aclose()


class TestJsonFileWithoutFsync(AgentStateStoreContract):
    @pytest.fixture
    async def state_store(self, tmp_path):
        return JsonFileAgentStateStore(tmp_path / "state", fsync=False)


def _all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


# --- default root and the environment variable -----------------------------------


def test_state_home_variable_name():
    assert STATE_HOME_ENV == "AGENT_JOURNAL_STATE_HOME"
    assert DEFAULT_STATE_HOME == "~/.agent-journal/state"


def test_default_root_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv(STATE_HOME_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_root("assistant") == tmp_path / ".agent-journal/state/assistant"
    assert default_root() == tmp_path / ".agent-journal/state/default"
    store = JsonFileAgentStateStore(agent_id="assistant")
    assert store.root == tmp_path / ".agent-journal/state/assistant"
    assert JsonFileAgentStateStore().root == tmp_path / ".agent-journal/state/default"


def test_environment_variable_replaces_the_state_home(monkeypatch, tmp_path):
    monkeypatch.setenv(STATE_HOME_ENV, str(tmp_path / "elsewhere"))
    assert JsonFileAgentStateStore(agent_id="bot").root == tmp_path / "elsewhere/bot"
    assert JsonFileAgentStateStore().root == tmp_path / "elsewhere/default"
    # An empty variable counts as unset.
    monkeypatch.setenv(STATE_HOME_ENV, "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_root("bot") == tmp_path / ".agent-journal/state/bot"


def test_an_explicit_root_wins(monkeypatch, tmp_path):
    monkeypatch.setenv(STATE_HOME_ENV, str(tmp_path / "env"))
    store = JsonFileAgentStateStore(tmp_path / "mine", agent_id="bot")
    assert store.root == tmp_path / "mine"
    assert JsonFileAgentStateStore(str(tmp_path / "str")).root == tmp_path / "str"


@pytest.mark.parametrize("agent_id", ["..", "../../x", "/", "a/b", "%2F", "~"])
def test_agent_ids_stay_inside_the_state_home(monkeypatch, tmp_path, agent_id):
    monkeypatch.setenv(STATE_HOME_ENV, str(tmp_path))
    root = default_root(agent_id)
    assert root.parent == tmp_path
    assert root.name == encode_segment(agent_id)


@pytest.mark.parametrize("agent_id", ["", "a\nb", "x" * 257])
def test_invalid_agent_ids_are_refused(agent_id, tmp_path):
    with pytest.raises(InvalidKeyError):
        default_root(agent_id)
    with pytest.raises(InvalidKeyError):
        JsonFileAgentStateStore(tmp_path, agent_id=agent_id)


async def test_default_root_is_used_for_files(monkeypatch, tmp_path):
    monkeypatch.setenv(STATE_HOME_ENV, str(tmp_path / "home"))
    store = JsonFileAgentStateStore(agent_id="assistant")
    await store.save("alice", "s1", "e", full_state())
    assert (tmp_path / "home/assistant/alice/s1/e.json").is_file()


# --- what is on disk ---------------------------------------------------------------


async def test_the_file_is_readable_json(tmp_path):
    store = JsonFileAgentStateStore(tmp_path)
    state = full_state()
    await store.save("alice", "s1", ENTRY, state)
    await store.save("alice", "s1", ENTRY, state)
    path = tmp_path / "alice" / "s1" / f"{encode_segment(ENTRY)}.json"
    text = path.read_text(encoding="utf-8")
    assert "\n  " in text  # indented for people
    doc = json.loads(text)
    assert list(doc) == [
        "version",
        "updated_at",
        "user_id",
        "session_id",
        "entry",
        "state",
    ]
    assert doc["version"] == 2
    assert doc["state"]["version"] == 2
    assert (doc["user_id"], doc["session_id"], doc["entry"]) == ("alice", "s1", ENTRY)
    assert doc["state"]["summary"] == state.summary
    assert doc["state"]["context"][2]["content"][2] == {
        "type": "tool_use",
        "id": "call-1",
        "name": "read_file",
        "input": {"path": "/etc/hosts"},
    }
    assert doc["updated_at"].endswith("+00:00")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_layout_uses_encoded_segments(tmp_path):
    store = JsonFileAgentStateStore(tmp_path)
    await store.save(None, "s/1", "e.x", full_state())
    await store.save("~", "s", "e", full_state())
    files = [p.relative_to(tmp_path).as_posix() for p in _all_files(tmp_path)]
    assert "~/s%2F1/e%2Ex.json" in files
    assert "%7E/s/e.json" in files


async def test_no_temporary_files_are_left(tmp_path):
    store = JsonFileAgentStateStore(tmp_path)
    await asyncio.gather(*(store.save("u", "s", "e", full_state()) for _ in range(20)))
    names = [p.name for p in _all_files(tmp_path)]
    assert sorted(names) == ["e.json", "e.lock"]


async def test_hostile_ids_never_leave_the_root(tmp_path):
    root = tmp_path / "root"
    store = JsonFileAgentStateStore(root)
    for hostile in HOSTILE_IDS:
        await store.save(hostile, hostile, hostile, full_state())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]
    for path in _all_files(root):
        rel = path.relative_to(root)
        assert len(rel.parts) == 3
        assert not any(part in (".", "..") for part in rel.parts)


async def test_a_corrupt_file_is_reported(tmp_path):
    store = JsonFileAgentStateStore(tmp_path)
    await store.save("u", "s", "e", full_state())
    (tmp_path / "u/s/e.json").write_text("{not json")
    with pytest.raises(CorruptRecordError, match="u"):
        await store.load("u", "s", "e")
    with pytest.raises(CorruptRecordError):
        await store.save("u", "s", "e", full_state())


async def test_file_system_errors_become_storage_errors(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = JsonFileAgentStateStore(blocker / "root")
    with pytest.raises(StorageError) as caught:
        await store.save("u", "s", "e", full_state())
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.transient is False
    with pytest.raises(StorageError) as caught:
        await store.list_sessions("u")
    assert isinstance(caught.value.__cause__, OSError)


async def test_foreign_directories_are_not_sessions(tmp_path):
    store = JsonFileAgentStateStore(tmp_path)
    await store.save("u", "s", "e", full_state())
    (tmp_path / "u" / "not a segment!").mkdir()
    (tmp_path / "u" / "empty").mkdir()
    (tmp_path / "u" / "stray-file").write_text("x")
    assert await store.list_sessions("u") == ["s"]


async def test_repr_names_the_root(tmp_path):
    assert str(tmp_path) in repr(JsonFileAgentStateStore(tmp_path))


# --- across processes ----------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from journal.errors import StaleStateError
    from journal.events import Msg
    from projections.agent_state import AgentState
    from stores.state import JsonFileAgentStateStore

    async def main(root, ident, saves):
        store = JsonFileAgentStateStore(root)
        conflicts = 0
        for n in range(saves):
            while True:
                found = await store.load("alice", "s1", "shared")
                state, version = found if found else (AgentState(), 0)
                state.context.append(
                    Msg(role="user", content=f"{ident}:{n}", id=f"{ident}-{n}")
                )
                try:
                    await store.save(
                        "alice", "s1", "shared", state, expected_version=version
                    )
                    break
                except StaleStateError:
                    conflicts += 1
        print(conflicts)

    sys.stdin.readline()  # start together
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    """
)


@pytest.mark.slow
def test_compare_and_swap_across_processes(tmp_path):
    processes, saves = 8, 10
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(tmp_path), str(i), str(saves)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for i in range(processes)
    ]
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
    conflicts = sum(int(out) for out, _ in outputs)

    store = JsonFileAgentStateStore(tmp_path)
    state, version = _load_now(store)
    assert version == processes * saves
    ids = [m.id for m in state.context]
    assert len(ids) == processes * saves
    assert sorted(ids) == sorted(
        f"{i}-{n}" for i in range(processes) for n in range(saves)
    )
    # Each process's own messages stay in the order it appended them.
    for i in range(processes):
        mine = [int(x.split("-")[1]) for x in ids if x.startswith(f"{i}-")]
        assert mine == list(range(saves))
    # The processes really raced (otherwise this test proves nothing).
    assert conflicts > 0


def _load_now(store: JsonFileAgentStateStore) -> tuple[AgentState, int]:
    found = asyncio.run(store.load("alice", "s1", "shared"))
    assert found is not None
    return found


async def test_a_file_nested_too_deeply_is_reported(tmp_path):
    # Hostile or damaged bytes must give the slot's CorruptRecordError, not a
    # RecursionError out of the decoder.
    store = JsonFileAgentStateStore(tmp_path)
    long_session = "s" * 200  # a hashed segment: listing reads the slot file
    for session in ("s", long_session):
        await store.save("u", session, "e", full_state())
    deep = b"[" * 100_000 + b"]" * 100_000
    for path in (tmp_path / "u").rglob("e.json"):
        path.write_bytes(b'{"state": ' + deep + b', "version": 1}')
    with pytest.raises(CorruptRecordError, match="session='s'"):
        await store.load("u", "s", "e")
    with pytest.raises(CorruptRecordError, match="session='s'"):
        await store.save("u", "s", "e", full_state())
    assert await store.list_sessions("u") == ["s"]


async def test_delete_removes_what_a_crashed_save_left(tmp_path):
    # A save killed between writing its temporary file and renaming it leaves
    # that file, which holds the whole state: deleting the slot (erasing the
    # user) must not leave it behind.
    store = JsonFileAgentStateStore(tmp_path)
    state = full_state()
    state.summary = "heron-basalt-5519"
    await store.save("u", "s", "e", state)
    await store.save("u", "s", "other", full_state())
    slot_file = tmp_path / "u/s/e.json"
    crashed = tmp_path / "u/s" / f".e.{'0' * 32}"
    crashed.write_bytes(slot_file.read_bytes())
    other_tmp = tmp_path / "u/s" / f".other.{'0' * 32}"
    other_tmp.write_bytes(b"not this slot's")
    assert await store.delete("u", "s", "e")
    assert not any(b"heron-basalt-5519" in p.read_bytes() for p in _all_files(tmp_path))
    assert other_tmp.exists()
    # A crashed first save: no slot to delete, its leftover goes all the same.
    crashed.write_bytes(slot_file.parent.joinpath("other.json").read_bytes())
    assert not await store.delete("u", "s", "e")
    assert not crashed.exists()
