"""The inspection and maintenance commands, run in-process through ``main``."""

from __future__ import annotations

import asyncio
import io
import json
import re
import shutil
import sys
from typing import TYPE_CHECKING

import pytest

from journal import (
    Journal,
    LeaseAcquired,
    MessageAppended,
    Msg,
    PermissionRuleSet,
    RunCompleted,
    RunInterrupted,
    RunStarted,
    TextBlock,
    ThreadKey,
    TodosWritten,
    ToolCallCompleted,
    ToolCallRequested,
    ToolResultBlock,
    ToolUseBlock,
)
from journal.cli import ROOT_ENV, STORAGE_OPTIONS_ENV, main, parse_storage_options
from projections.agent_state import AgentState
from tests.stores._segment_child import flip_record_byte

if TYPE_CHECKING:
    from pathlib import Path

KEY = ThreadKey("bot", "s1", "alice")
OTHER = ThreadKey("bot", "s2", None, namespace="ops")
THREAD = ["--agent", "bot", "--session", "s1", "--user", "alice"]


# --- helpers (also used by the other CLI test modules) -----------------------------


async def _write_threads(root: Path, segments: bool) -> None:
    journal = Journal.open(root, fsync=False, segments=segments)
    async with journal.writer(KEY, holder="test-a") as w:  # v1: the fence
        await w.append(
            [RunStarted("r1"), MessageAppended(Msg("user", "weather?"))], run_id="r1"
        )  # v2
        use = ToolUseBlock("c1", "get_weather", {"city": "Oslo"})
        await w.append(
            [
                MessageAppended(Msg("assistant", [TextBlock("checking"), use])),
                ToolCallRequested("c1", "get_weather", {"city": "Oslo"}),
            ],
            run_id="r1",
        )  # v3
        await w.append(
            [
                ToolCallCompleted("c1", {"celsius": 3}),
                MessageAppended(Msg("tool", [ToolResultBlock("c1", {"celsius": 3})])),
            ],
            run_id="r1",
        )  # v4
        await w.append(
            [MessageAppended(Msg("assistant", "3 C in Oslo")), RunCompleted("r1")],
            run_id="r1",
        )  # v5
        await w.append(
            [
                PermissionRuleSet("bash", "deny"),
                TodosWritten([{"content": "pack", "status": "pending"}], 1),
            ]
        )  # v6
        # v7: a run that requests a tool and never finishes: its writer "dies".
        await w.append(
            [RunStarted("r2"), ToolCallRequested("c2", "send_email", {"to": "bob"})],
            run_id="r2",
        )
    async with journal.writer(OTHER, holder="test-b") as w:
        await w.append([MessageAppended(Msg("user", "hello"))])
    await journal.aclose()


def build_root(root: Path, *, segments: bool = True) -> Path:
    """Two threads under ``root``: KEY (7 records, run r2 unfinished) and OTHER (2).

    Records go to segment files, or with ``segments=False`` to a file each.
    """
    asyncio.run(_write_threads(root, segments))
    return root


def flip_record(root: Path, version: int, key: ThreadKey = KEY) -> None:
    """Flip the middle byte of a record on disk, whichever layout holds it."""
    flip_record_byte(root / key.prefix / "log", version)


async def _read(root: Path, key: ThreadKey):
    journal = Journal.open(root, fsync=False)
    try:
        records = [r async for r in journal.records(key)]
        state = await journal.load(key) if records else None
        return records, state
    finally:
        await journal.aclose()


def read_thread(root: Path, key: ThreadKey = KEY):
    """``(records, state)`` of a thread, read through the engine."""
    return asyncio.run(_read(root, key))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def root(tmp_path):
    return build_root(tmp_path / "journal")


# --- ls ----------------------------------------------------------------------------


def test_ls_lists_threads_with_head_records_and_activity(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "ls")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "THREAD",
        "HEAD",
        "RECORDS",
        "LAST",
        "ACTIVITY",
        "ATTENTION",
    ]
    assert "default/bot/alice/s1/main" in out
    assert "ops/bot/~/s2/main" in out
    row = next(line for line in lines if "alice/s1" in line).split()
    assert row[1:3] == ["7", "7"]
    assert row[3].startswith("20")  # a date
    # Run r2 was left unfinished with its send_email call: the cheap check says so.
    assert "unfinished run r2; 1 uncertain call (c2)" in out
    other = next(line for line in lines if "ops/bot" in line)
    assert other.rstrip().endswith("-")
    assert lines[-1] == "2 threads, 1 needing attention"


def test_ls_filters_and_json(root, capsys):
    code, out, _ = run(
        capsys, "ls", "--root", str(root), "--namespace", "ops", "--json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["count"] == 1
    (thread,) = doc["threads"]
    assert thread["namespace"] == "ops"
    assert thread["user_id"] is None
    assert thread["head"] == thread["records"] == 2
    assert thread["last_activity"] > 0

    code, out, _ = run(capsys, "ls", "--root", str(root), "--user", "alice", "--json")
    assert [t["session_id"] for t in json.loads(out)["threads"]] == ["s1"]
    code, out, _ = run(capsys, "ls", "--root", str(root), "--thread", "nope")
    assert code == 0
    assert "no threads" in out


def test_root_comes_from_the_environment(root, capsys, monkeypatch):
    monkeypatch.setenv(ROOT_ENV, str(root))
    code, out, _ = run(capsys, "ls", "--json")
    assert code == 0
    assert json.loads(out)["count"] == 2


def test_empty_root(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, out, _ = run(capsys, "--root", str(tmp_path / "empty"), "ls")
    assert code == 0
    assert "no threads" in out


# --- log ---------------------------------------------------------------------------


def test_log_human(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "log", *THREAD)
    assert code == 0
    assert out.splitlines()[0] == "default/bot/alice/s1/main  head 7"
    header = out.splitlines()[1].split()
    assert header == [
        "VERSION",
        "EPOCH",
        "WRITER",
        "COMMITTED",
        "RUN",
        "EVENT",
        "DETAIL",
    ]
    for name in (
        "ThreadCreated",
        "LeaseAcquired",
        "RunStarted",
        "ToolCallRequested",
        "ToolCallCompleted",
        "PermissionRuleSet",
        "TodosWritten",
    ):
        assert name in out
    assert "[tool_use get_weather" in out
    assert "bash = deny" in out


def test_log_json_and_ranges(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "--json", "log", *THREAD)
    assert code == 0
    doc = json.loads(out)
    assert doc["head"] == 7
    assert [r["version"] for r in doc["records"]] == list(range(1, 8))
    first = doc["records"][0]
    assert [e["type"] for e in first["events"]] == ["ThreadCreated", "LeaseAcquired"]
    assert first["prev_hash"] == "0" * 64
    assert doc["records"][1]["prev_hash"] == first["hash"]

    code, out, _ = run(
        capsys, "--root", str(root), "log", *THREAD, "--tail", "2", "--json"
    )
    assert [r["version"] for r in json.loads(out)["records"]] == [6, 7]
    code, out, _ = run(
        capsys,
        "--root",
        str(root),
        "log",
        *THREAD,
        "--from",
        "2",
        "--to",
        "3",
        "--json",
    )
    assert [r["version"] for r in json.loads(out)["records"]] == [2, 3]


# --- state -------------------------------------------------------------------------


def test_state_human_and_json(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "state", *THREAD)
    assert code == 0
    assert "version 7 (head)" in out
    assert "messages (4)" in out
    assert "bash=deny" in out
    assert "send_email call c2" in out
    assert "[pending] pack" in out

    code, out, _ = run(capsys, "--root", str(root), "state", *THREAD, "--json")
    state = AgentState.from_json(out)
    assert state.version == 7
    assert state.active_run_id == "r2"
    assert list(state.tool_context.pending_calls) == ["c2"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("command", [["state", *THREAD], ["log", *THREAD], ["ls"]])
def test_json_is_indented_on_a_terminal_and_one_line_in_a_pipe(
    root, capsys, monkeypatch, command
):
    code, piped, _ = run(capsys, "--root", str(root), "--json", *command)
    assert code == 0
    assert piped.count("\n") == 1  # the document, then a newline

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["--root", str(root), "--json", *command]) == 0
    shown = terminal.getvalue()
    assert shown.count("\n") > 10
    assert '\n  "' in shown  # two spaces a level
    assert json.loads(shown) == json.loads(piped)


def test_state_time_travel(root, capsys):
    code, out, _ = run(
        capsys, "--root", str(root), "state", *THREAD, "--at", "3", "--json"
    )
    assert code == 0
    state = AgentState.from_json(out)
    assert state.version == 3
    assert len(state.context) == 2
    assert list(state.tool_context.pending_calls) == ["c1"]
    assert state.permission_context.rules == {}

    code, out, _ = run(capsys, "--root", str(root), "state", *THREAD, "--at", "3")
    assert "version 3 (head 7)" in out

    code, _, err = run(capsys, "--root", str(root), "state", *THREAD, "--at", "99")
    assert code == 1
    assert "no version 99" in err


# --- diff --------------------------------------------------------------------------


def test_diff_default_is_previous_to_head(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "diff", *THREAD, "--json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["from"], doc["to"]) == (6, 7)
    fields = {c["field"]: c for c in doc["changes"]}
    assert fields["active_run_id"] == {
        "field": "active_run_id",
        "kind": "changed",
        "old": None,
        "new": "r2",
    }
    assert fields["tool_context.pending_calls.c2"]["kind"] == "added"
    assert [r["version"] for r in doc["records"]] == [7]


def test_diff_range_human(root, capsys):
    code, out, _ = run(
        capsys, "--root", str(root), "diff", *THREAD, "--from", "2", "--to", "6"
    )
    assert code == 0
    assert "version 2 -> 6" in out
    assert "permission_context.rules.bash" in out
    assert '(absent)  ->  "deny"' in out
    assert "tasks_context.revision" in out
    assert "context: +3 / -0 messages" in out
    assert "records 3..6:" in out
    assert "ToolCallCompleted" in out

    code, out, _ = run(
        capsys,
        "--root",
        str(root),
        "diff",
        *THREAD,
        "--json",
        "--from",
        "2",
        "--to",
        "6",
    )
    doc = json.loads(out)
    assert len(doc["messages"]["added"]) == 3
    assert doc["messages"]["removed"] == []


def test_diff_bad_range_is_usage(root, capsys):
    code, _, err = run(
        capsys, "--root", str(root), "diff", *THREAD, "--from", "5", "--to", "2"
    )
    assert code == 2
    assert "after" in err


# --- export ------------------------------------------------------------------------


def test_export_jsonl_to_stdout_and_file(root, capsys, tmp_path):
    code, out, _ = run(
        capsys, "--root", str(root), "export", *THREAD, "--format", "jsonl"
    )
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [r["version"] for r in lines] == list(range(1, 8))
    for record in lines:
        assert set(record) == {
            "version",
            "epoch",
            "writer",
            "batch_id",
            "run_id",
            "committed_at",
            "prev_hash",
            "hash",
            "events",
        }
        assert all("type" in e for e in record["events"])
    assert lines[2]["run_id"] == "r1"
    assert lines[2]["events"][1] == {
        "type": "ToolCallRequested",
        "call_id": "c1",
        "name": "get_weather",
        "input": {"city": "Oslo"},
        "run_id": None,
    }

    target = tmp_path / "out.jsonl"
    code, out, err = run(
        capsys, "--root", str(root), "export", *THREAD, "-o", str(target)
    )
    assert code == 0
    assert out == ""
    assert "exported 7 records" in err
    assert [json.loads(x) for x in target.read_text().splitlines()] == lines


# --- checkpoint --------------------------------------------------------------------


def test_checkpoint(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "checkpoint", *THREAD, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["version"] == 7  # a checkpoint is derived: it commits no record
    assert (root / KEY.prefix / "checkpoints" / f"{7:020d}.ckpt").exists()
    records, _ = read_thread(root)
    assert len(records) == 7
    # Writing a checkpoint takes no lease, so it is no recovery either.
    assert not any(isinstance(e, RunInterrupted) for e in records[-1].events)
    code, out, _ = run(capsys, "--root", str(root), "verify", *THREAD, "--json")
    assert code == 0
    assert json.loads(out)["threads"][0]["checkpoints"] == 1

    code, out, _ = run(capsys, "--root", str(root), "checkpoint", *THREAD)
    assert "checkpoint written at version 7" in out  # idempotent at the same head


# --- recover -----------------------------------------------------------------------


def test_index_registers_threads_the_index_lacks(root, capsys):
    # As a store written before the thread index: no entries, no marker.
    shutil.rmtree(root / "~threads")
    listed_before = run(capsys, "--root", str(root), "ls", "--json")[1]
    code, out, _ = run(capsys, "--root", str(root), "index")
    assert code == 0
    count = len(json.loads(listed_before)["threads"])
    assert count > 0
    assert out == f"thread index complete: {count} threads, {count} added by this run\n"
    assert (root / "~threads" / "COMPLETE").is_file()
    code, out, _ = run(capsys, "--root", str(root), "index", "--json")
    assert code == 0
    assert json.loads(out) == {"threads": count, "added": 0}
    assert run(capsys, "--root", str(root), "ls", "--json")[1] == listed_before


def test_index_refuses_a_root_that_is_no_journal(tmp_path, capsys):
    code, _, err = run(capsys, "--root", str(tmp_path / "missing"), "index")
    assert code == 2
    assert "does not exist" in err
    assert not (tmp_path / "missing").exists()


def test_recover_interrupts_the_unfinished_run_and_lists_uncertain_calls(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "recover", *THREAD, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["previous_head"] == 7
    assert doc["fence_version"] == 8
    assert doc["interrupted_now"] == ["r2"]
    assert [c["call_id"] for c in doc["uncertain_tool_calls"]] == ["c2"]
    assert doc["uncertain_tool_calls"][0]["outcome"] == "unknown"
    assert [r["run_id"] for r in doc["runs"]] == ["r2"]

    records, state = read_thread(root)
    fence = records[-1]
    assert fence.version == 8
    assert any(isinstance(e, LeaseAcquired) for e in fence.events)
    assert RunInterrupted("r2", reason="recovered", by="recovery") in fence.events
    # Never re-run: no tool result was invented.
    assert not any(
        isinstance(e, ToolCallCompleted) and e.call_id == "c2"
        for r in records
        for e in r.events
    )
    assert state.shutdown_interrupted
    assert list(state.tool_context.pending_calls) == ["c2"]

    # A second recovery finds no unfinished run, but the call is still uncertain.
    code, out, _ = run(capsys, "--root", str(root), "recover", *THREAD)
    assert code == 0
    assert "no unfinished run" in out
    assert "c2" in out
    assert "send_email" in out
    assert "nothing was re-run" in out


async def _hold_lease(root: Path, *, run: bool = False) -> None:
    journal = Journal.open(root, fsync=False)
    # Acquire and abandon the writer: its lease stays live for 30 s.
    writer = await journal.acquire(KEY, holder="someone-else", lease_ttl=30)
    if run:
        await writer.append([RunStarted("r3")], run_id="r3")


def test_recover_with_a_live_lease_fails_cleanly(root, capsys):
    # The holder's own fence already interrupted r2; its run r3 is open: a
    # recovery would need the lease, which is live.
    asyncio.run(_hold_lease(root, run=True))
    before, _ = read_thread(root)
    code, out, err = run(capsys, "--root", str(root), "recover", *THREAD)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert "someone-else" in err
    assert "Traceback" not in err
    # The expiry is a readable time, and how far off it is.
    assert re.search(r"until 20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ \(in \d+ s\)", err), err
    assert len(read_thread(root)[0]) == len(before)  # nothing written


def test_recover_writes_nothing_when_nothing_needs_recovery(root, capsys):
    # The new holder's fence interrupted r2; no run is open any more.
    asyncio.run(_hold_lease(root))
    before, _ = read_thread(root)
    code, out, _ = run(capsys, "--root", str(root), "recover", *THREAD)
    assert code == 0
    assert "nothing to recover" in out
    assert "nothing written" in out
    assert re.search(
        r"lease: held by someone-else \(epoch 2\) until 20.*\(in \d+ s\)", out
    )
    assert "c2" in out  # still uncertain: reconcile settles it, not recover
    assert len(read_thread(root)[0]) == len(before)


def test_a_released_lease_reads_as_released_not_as_expired_in_1970(root, capsys):
    """A closed writer releases its lease with an expiry of 0 (past by any clock):
    fails when the line reads it as a lease that expired at the epoch."""

    async def write_and_close() -> None:
        journal = Journal.open(root, fsync=False)
        async with journal.writer(KEY, holder="someone-else") as w:
            await w.append([RunStarted("r4")], run_id="r4")
            await w.append([RunCompleted("r4")], run_id="r4")

    asyncio.run(write_and_close())
    code, out, _ = run(capsys, "--root", str(root), "recover", *THREAD)
    assert code == 0
    assert "1970" not in out
    assert re.search(r"lease: released by someone-else \(epoch \d+\)", out), out


# --- verify ------------------------------------------------------------------------


def test_verify_every_thread(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "verify")
    assert code == 0
    assert out.count("ok  ") == 2
    assert "verified 2 threads: 2 ok, 0 with problems" in out

    code, out, _ = run(capsys, "--root", str(root), "verify", "--json")
    doc = json.loads(out)
    assert doc["ok"] is True
    assert doc["verified"] == 2
    assert {t["records"] for t in doc["threads"]} == {7, 2}


@pytest.mark.parametrize("segments", [True, False], ids=["segments", "files"])
def test_verify_finds_a_flipped_byte(tmp_path, capsys, segments):
    root = build_root(tmp_path / "journal", segments=segments)
    flip_record(root, 4)
    code, out, _ = run(capsys, "--root", str(root), "verify", *THREAD)
    assert code == 1
    assert out.startswith("FAIL")
    assert "problem: version 4" in out

    code, out, _ = run(capsys, "--root", str(root), "verify", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["ok"] is False
    assert doc["with_problems"] == 1
    bad = next(t for t in doc["threads"] if not t["ok"])
    assert bad["session_id"] == "s1"
    assert any(p["version"] == 4 for p in bad["problems"])

    # Other readers report the corruption as one line, not a traceback.
    code, out, err = run(capsys, "--root", str(root), "log", *THREAD)
    assert code == 1
    assert "version 4" in err
    assert "Traceback" not in err
    assert err.count("\n") == 1


def test_a_thread_listed_without_records_is_named_as_such(root, capsys):
    """A writer that stopped between the thread's LEASE and its first record leaves
    a thread ``ls`` lists at head 0: fails when the thread commands then say it
    does not exist."""
    key = ThreadKey("bot", "empty", "alice")

    async def lease_only() -> None:
        journal = Journal.open(root, fsync=False)
        await journal._log(key).acquire_lease(
            holder="gone", ttl=1.0, wait=0.0, clock=journal.clock
        )

    asyncio.run(lease_only())
    code, out, _ = run(capsys, "--root", str(root), "ls")
    assert code == 0
    assert "empty" in out
    code, _, err = run(
        capsys, "--root", str(root), "state",
        "--agent", "bot", "--session", "empty", "--user", "alice",
    )  # fmt: skip
    assert code == 1
    assert "does not exist" not in err
    assert "no records" in err


def test_verify_named_thread_that_does_not_exist(root, capsys):
    code, _, err = run(
        capsys, "--root", str(root), "verify", "--agent", "bot", "--session", "zz"
    )
    assert code == 1
    assert "does not exist" in err


# --- usage and errors --------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["log", "--agent", "bot"],
        ["state", "--agent", "bot", "--session", "s1", "--at", "-1"],
        ["export", "--agent", "bot", "--session", "s1", "--format", "csv"],
        ["ls", "--option", "novalue"],
        ["ls", "--option", "fsync:=notjson"],
    ],
)
def test_bad_usage_exits_2(root, capsys, argv):
    code, out, err = run(capsys, "--root", str(root), *argv)
    assert code == 2
    assert out == ""
    assert "error" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["log", "--agent", "", "--session", "s1"],
        ["state", "--agent", "bot", "--session", "bad\x01id"],
        ["log", "--agent", "bot", "--session", "s" * 300],
        ["ls", "--user", ""],
        ["verify", "--namespace", "a\nb"],
    ],
)
def test_invalid_ids_exit_2_with_a_clear_message(root, capsys, argv):
    code, out, err = run(capsys, "--root", str(root), *argv)
    assert code == 2
    assert out == ""
    assert "invalid thread key" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "command",
    ["log", "state", "diff", "export", "checkpoint", "recover", "runs", "history"],
)
def test_a_missing_thread_is_an_error_and_nothing_is_written(root, capsys, command):
    code, out, err = run(
        capsys, "--root", str(root), command, "--agent", "bot", "--session", "nope"
    )
    assert code == 1
    assert out == ""
    assert "does not exist" in err
    assert not (root / "default" / "bot" / "~").exists()


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "verify" in capsys.readouterr().out


def test_storage_options(monkeypatch):
    monkeypatch.setenv(
        STORAGE_OPTIONS_ENV, '{"endpoint_url": "http://x", "anon": false}'
    )
    options = parse_storage_options(
        ["key=abc", "retries:=3", "client_kwargs.region_name=eu-west-1", "anon:=true"]
    )
    assert options == {
        "endpoint_url": "http://x",
        "anon": True,
        "key": "abc",
        "retries": 3,
        "client_kwargs": {"region_name": "eu-west-1"},
    }


def test_storage_options_reach_the_store(root, capsys):
    # LocalStore takes fsync=...; an unknown option is refused by the backend.
    code, _, _ = run(capsys, "--root", str(root), "--option", "fsync:=false", "ls")
    assert code == 0
    code, _, err = run(capsys, "--root", str(root), "--option", "bogus=1", "ls")
    assert code == 2
    assert "bogus" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_verifying_many_threads_shows_progress_on_a_terminal(root, capsys, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = main(["--root", str(root), "verify"])
    assert code == 0
    assert "verifying threads 2/2" in terminal.getvalue()
    assert "verified 2 threads" in capsys.readouterr().out
