"""``agent-journal import``: a snapshot-mode slot becomes a journal thread."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

from journal import AgentStateReplaced, LeaseAcquired, Msg, ThreadCreated, ThreadKey
from projections.agent_state import AgentState, PendingToolCall
from stores.state import JsonFileAgentStateStore, SqlAgentStateStore
from tests.cli.test_commands import read_thread, run

KEY = ThreadKey("bot", "s1", "alice")
THREAD = ["--agent", "bot", "--session", "s1", "--user", "alice"]
STATE_HOME_ENV = "AGENT_JOURNAL_STATE_HOME"  # SPEC: replaces ~/.agent-journal/state


def slot_state() -> AgentState:
    state = AgentState(
        session_id="s1",
        user_id="alice",
        context=[
            Msg("user", "hi", id="m1"),
            Msg("assistant", "hello", id="m2", metadata={"k": 1}),
        ],
        summary="an earlier chat",
    )
    state.permission_context.mode = "accept_edits"
    state.permission_context.rules = {"bash": "deny", "read": "allow"}
    state.plan_mode_context.active = True
    state.plan_mode_context.plan_file = "plan.md"
    state.tasks_context.todos = [{"content": "ship it", "status": "in_progress"}]
    state.tasks_context.revision = 4
    state.tasks_context.goal = "release"
    state.tasks_context.requirements = ["tests pass"]
    state.tool_context.active_groups = ["git"]
    return state


async def _save(store, key: ThreadKey, state: AgentState, times: int = 1) -> None:
    try:
        for _ in range(times):
            await store.save(key.user_id, key.session_id, key.state_entry(), state)
    finally:
        await store.aclose()


def comparable(state: AgentState) -> dict:
    """What a migration must keep: everything but the version."""
    data = msgspec.to_builtins(state)
    data.pop("version")
    return data


def journal_files(root):
    return sorted(
        (p.relative_to(root), p.read_bytes()) for p in root.rglob("*") if p.is_file()
    )


def test_import_from_a_json_file_slot(tmp_path, capsys):
    slots, root = tmp_path / "slots", tmp_path / "journal"
    asyncio.run(_save(JsonFileAgentStateStore(slots), KEY, slot_state(), times=3))

    code, out, _ = run(
        capsys, "--root", str(root), "import", *THREAD, "--from", str(slots)
    )
    assert code == 0, out
    assert "slot version 3" in out
    assert "at version 1" in out

    records, state = read_thread(root)
    assert len(records) == 1
    (first,) = records
    assert first.version == 1
    types = [type(e) for e in first.events]
    assert types == [ThreadCreated, LeaseAcquired, AgentStateReplaced]
    replaced = first.events[2]
    assert replaced.reason == "migrated"
    assert comparable(state) == comparable(slot_state())
    assert state.version == 1

    # The thread verifies clean.
    code, _, _ = run(capsys, "--root", str(root), "verify", *THREAD)
    assert code == 0


def test_import_again_refuses_and_writes_nothing(tmp_path, capsys):
    slots, root = tmp_path / "slots", tmp_path / "journal"
    asyncio.run(_save(JsonFileAgentStateStore(slots), KEY, slot_state()))
    assert (
        run(capsys, "--root", str(root), "import", *THREAD, "--from", str(slots))[0]
        == 0
    )
    before = journal_files(root)

    code, out, err = run(
        capsys, "--root", str(root), "import", *THREAD, "--from", f"file://{slots}"
    )
    assert code == 1
    assert out == ""
    assert "already exists" in err
    assert journal_files(root) == before  # not even the LEASE was touched


def test_import_of_a_missing_slot_refuses_and_writes_nothing(tmp_path, capsys):
    slots, root = tmp_path / "slots", tmp_path / "journal"
    asyncio.run(_save(JsonFileAgentStateStore(slots), KEY, slot_state()))
    code, out, err = run(
        capsys,
        "--root", str(root),
        "import", "--agent", "bot", "--session", "other", "--from", str(slots),
    )  # fmt: skip
    assert code == 1
    assert out == ""
    assert "no state slot" in err
    assert not root.exists() or journal_files(root) == []


def test_import_from_the_default_json_store(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(STATE_HOME_ENV, str(tmp_path / "state"))
    anonymous = ThreadKey("bot", "s9")
    asyncio.run(_save(JsonFileAgentStateStore(agent_id="bot"), anonymous, slot_state()))
    root = tmp_path / "journal"
    code, out, _ = run(
        capsys,
        "--root", str(root), "--json",
        "import", "--agent", "bot", "--session", "s9",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["version"] == 1
    assert doc["messages"] == 2
    _, state = read_thread(root, anonymous)
    assert state.context == slot_state().context


def test_import_from_sqlite(tmp_path, capsys):
    db = tmp_path / "state.db"
    url = f"sqlite+aiosqlite:///{db}"
    asyncio.run(_save(SqlAgentStateStore(url), KEY, slot_state()))
    root = tmp_path / "journal"
    code, _, _ = run(capsys, "--root", str(root), "import", *THREAD, "--from", url)
    assert code == 0
    _, state = read_thread(root)
    assert comparable(state) == comparable(slot_state())

    missing = f"sqlite+aiosqlite:///{tmp_path / 'missing.db'}"
    code, _, err = run(
        capsys, "--root", str(root), "import", "--agent", "x", "--session", "y",
        "--from", missing,
    )  # fmt: skip
    assert code == 1
    assert "no database file" in err
    assert not (tmp_path / "missing.db").exists()


def test_pending_tool_calls_stay_uncertain(tmp_path, capsys):
    slots, root = tmp_path / "slots", tmp_path / "journal"
    state = slot_state()
    state.tool_context.pending_calls["c9"] = PendingToolCall(
        "c9", "deploy", {"env": "prod"}, "r9", 7
    )
    asyncio.run(_save(JsonFileAgentStateStore(slots), KEY, state))
    code, out, _ = run(
        capsys, "--root", str(root), "import", *THREAD, "--from", str(slots)
    )
    assert code == 0
    assert "uncertain" in out
    _, loaded = read_thread(root)
    assert list(loaded.tool_context.pending_calls) == ["c9"]
    code, out, _ = run(capsys, "--root", str(root), "recover", *THREAD)
    assert "deploy" in out


@pytest.mark.parametrize("source", ["ftp://host/x", "mongodb://x"])
def test_import_from_an_unknown_scheme_is_usage(tmp_path, capsys, source):
    code, _, err = run(
        capsys, "--root", str(tmp_path), "import", *THREAD, "--from", source
    )
    assert code == 2
    assert "not a state store URL" in err
