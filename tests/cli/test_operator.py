"""The operator's commands of issue 14: thread paths, runs, history, log filters and
--follow, reconcile, root checks, import of an export, usage niceties."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from journal import Journal, MessageAppended, Msg, ToolCallReconciled
from journal.cli import main
from journal.cli.commands import follow_log
from journal.cli.options import LogOptions
from tests.cli.test_commands import KEY, THREAD, build_root, read_thread, run

PATH = "default/bot/alice/s1/main"


# --- naming a thread -----------------------------------------------------------------


def test_the_path_ls_prints_names_the_thread(root, capsys):
    _, by_flags, _ = run(capsys, "--root", str(root), "log", *THREAD)
    code, by_path, _ = run(capsys, "--root", str(root), "log", PATH)
    assert code == 0
    assert by_path == by_flags
    # The anonymous user is ~ in a path, as ls prints it.
    code, out, _ = run(capsys, "--root", str(root), "state", "ops/bot/~/s2/main")
    assert code == 0
    assert "ops/bot/~/s2/main  version 2 (head)" in out
    # A shorter path filters ls and verify.
    code, out, _ = run(capsys, "--root", str(root), "ls", "ops", "--json")
    assert [t["session_id"] for t in json.loads(out)["threads"]] == ["s2"]


def test_user_left_out_means_any_user_everywhere(root, capsys):
    # Thread commands: the agent and session have one thread, whoever's it is.
    code, out, _ = run(
        capsys, "--root", str(root), "log", "--agent", "bot", "--session", "s1"
    )
    assert code == 0
    assert out.startswith(f"{PATH}  head 7")
    code, out, _ = run(
        capsys, "--root", str(root), "verify", "--agent", "bot", "--session", "s1"
    )
    assert code == 0
    assert "verified 1 thread" in out
    # ~ selects the anonymous user, who has no thread in session s1.
    code, _, err = run(
        capsys,
        "--root",
        str(root),
        "verify",
        "--agent",
        "bot",
        "--session",
        "s1",
        "--user",
        "~",
    )
    assert code == 1
    assert "does not exist" in err


def test_bad_paths_and_both_forms_are_usage_errors(root, capsys):
    for argv in (
        ["log", "a/b/c"],
        ["log", PATH, "--agent", "bot"],
        ["log", "a//b/c/d"],
    ):
        code, out, err = run(capsys, "--root", str(root), *argv)
        assert code == 2, argv
        assert out == ""
        assert err.count("\n") == 1, err


# --- roots that are not journals -----------------------------------------------------


def test_a_root_that_is_not_a_journal_exits_2(root, tmp_path, capsys):
    regular = tmp_path / "file"
    regular.write_text("x")
    for bad, words in (
        (tmp_path / "missing", "does not exist"),
        (regular, "not a directory"),
        (root.parent, "one level above"),  # holds journal/, a journal root
    ):
        for argv in (["ls"], ["verify"], ["log", PATH]):
            code, out, err = run(capsys, "--root", str(bad), *argv)
            assert code == 2, (bad, argv, err)
            assert out == ""
            assert err.count("\n") == 1
            assert words in err or "cannot be used" in err, err
            assert str(bad) in err
    _, _, err = run(capsys, "--root", str(root.parent), "verify")
    assert f"--root {root}" in err  # the fix is suggested


async def test_a_root_on_another_file_system_is_not_checked_as_a_local_path(tmp_path):
    """A store of another file system (fsspec's) holds its root in a string that
    names no local directory: the root check lists the store, not the disk."""
    from fsspec.implementations.memory import MemoryFileSystem

    from journal import Journal
    from journal.cli.commands.root import probe_root
    from stores.fsspec_store import FsspecStore

    fs = MemoryFileSystem()
    prefix = f"/probe-{tmp_path.name}"
    fs.pipe(f"{prefix}/default/a/~/s/main/log/00000000000000000001.rec", b"r")
    journal = Journal(FsspecStore(MemoryFileSystem, prefix))
    try:
        assert not (tmp_path / prefix.lstrip("/")).exists()
        assert await probe_root(journal, "memfs") is None
        fs.rm(prefix, recursive=True)
        fs.pipe(f"{prefix}/default/a/~/s/main/x/y", b"not a journal")
        problem = await probe_root(journal, "memfs")
        assert problem is not None
        assert "not a journal root" in problem
    finally:
        fs.rm(prefix, recursive=True)
        await journal.aclose()


# --- log filters ---------------------------------------------------------------------


def test_log_by_run_and_by_type(root, capsys):
    code, out, _ = run(
        capsys, "--root", str(root), "--json", "log", PATH, "--run", "r1"
    )
    assert code == 0
    doc = json.loads(out)
    assert [r["version"] for r in doc["records"]] == [2, 3, 4, 5]
    code, out, _ = run(capsys, "--root", str(root), "log", PATH, "--run", "r1")
    # Continuation lines carry the run id.
    assert all(" r1 " in line for line in out.splitlines()[2:]), out

    code, out, _ = run(
        capsys, "--root", str(root), "--json", "log", PATH,
        "--type", "ToolCallRequested", "--type", "RunStarted",
    )  # fmt: skip
    doc = json.loads(out)
    kinds = [(r["version"], [e["type"] for e in r["events"]]) for r in doc["records"]]
    assert kinds == [
        (2, ["RunStarted"]),
        (3, ["ToolCallRequested"]),
        (7, ["RunStarted", "ToolCallRequested"]),
    ]
    code, _, err = run(capsys, "--root", str(root), "log", PATH, "--type", "Nope")
    assert code == 2
    assert "Nope" in err


async def _append_later(root, count: int) -> None:
    journal = Journal.open(root, fsync=False)
    async with journal.writer(KEY, holder="later") as w:
        for i in range(count):
            await asyncio.sleep(0.05)
            await w.append([MessageAppended(Msg("user", f"later {i}"))])
    await journal.aclose()


def test_log_follow_shows_records_as_they_land(root):
    batches = []

    async def scenario() -> None:
        journal = Journal.open(root, fsync=False)
        options = LogOptions(root=str(root), key=KEY, follow=True, poll=0.02, limit=11)
        try:
            # 7 records now; the writer adds a fence and 3 messages.
            await asyncio.gather(
                follow_log(journal, options, batches.append), _append_later(root, 3)
            )
        finally:
            await journal.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 60))
    versions = [r.version for b in batches for r in b.records]
    assert versions == list(range(1, 12))
    assert not batches[0].continued
    assert all(b.continued for b in batches[1:])


def test_log_follow_runs_until_interrupted(root):
    # As an operator runs it: a process stopped with Ctrl-C (SIGINT) exits 130.
    proc = subprocess.Popen(
        [sys.executable, "-m", "journal", "--root", str(root), "log", PATH, "-f",
         "--poll", "0.05", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    first = [proc.stdout.readline() for _ in range(7)]
    assert [json.loads(line)["version"] for line in first] == list(range(1, 8))
    asyncio.run(_append_later(root, 1))
    assert json.loads(proc.stdout.readline())["version"] == 8  # the fence
    assert json.loads(proc.stdout.readline())["version"] == 9
    proc.send_signal(2)
    assert proc.wait(30) == 130
    assert "Traceback" not in proc.stderr.read()


# --- runs and history ----------------------------------------------------------------


def test_runs_shows_outcomes_and_call_statuses(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "--json", "runs", PATH)
    assert code == 0
    runs = {r["run_id"]: r for r in json.loads(out)["runs"]}
    assert runs["r1"]["status"] == "completed"
    assert [c["status"] for c in runs["r1"]["tool_calls"]] == ["completed"]
    assert runs["r2"]["status"] == "unfinished"
    assert [c["status"] for c in runs["r2"]["tool_calls"]] == ["uncertain"]
    code, out, _ = run(capsys, "--root", str(root), "runs", PATH)
    assert "uncertain: c2" in out
    code, _, err = run(capsys, "--root", str(root), "runs", PATH, "--run", "zz")
    assert code == 1
    assert "no run 'zz'" in err


def test_history_marks_cleared_messages(root, capsys):
    async def clear() -> None:
        journal = Journal.open(root, fsync=False)
        async with journal.writer(KEY) as w:
            await w.clear_context("operator test")
        await journal.aclose()

    asyncio.run(clear())
    code, out, _ = run(capsys, "--root", str(root), "--json", "history", PATH)
    assert code == 0
    messages = json.loads(out)["messages"]
    assert len(messages) == 4
    assert all(m["cleared_at"] == 9 and not m["in_context"] for m in messages)
    code, out, _ = run(capsys, "--root", str(root), "history", PATH)
    assert "4 messages ever, 4 no longer in context" in out
    assert out.count("cleared 9") == 4


# --- reconcile -----------------------------------------------------------------------


def test_reconcile_needs_exactly_the_uncertain_set(root, capsys):
    before, _ = read_thread(root)
    for argv, words in (
        (["--call", "c9=sent"], ["missing a verdict for c2", "not uncertain: c9"]),
        (["--call", "c2=sent", "--call", "c3=x"], ["not uncertain: c3"]),
        ([], ["--call CALL_ID=OUTCOME"]),
        (["--call", "c2=a", "--error", "c2=b"], ["given twice"]),
    ):
        code, out, err = run(capsys, "--root", str(root), "reconcile", PATH, *argv)
        assert code == 2, argv
        assert out == ""
        assert err.count("\n") == 1
        for word in words:
            assert word in err, (word, err)
    assert len(read_thread(root)[0]) == len(before)  # nothing written

    code, out, _ = run(
        capsys, "--root", str(root), "--json", "reconcile", PATH,
        "--error", "c2=bounced", "--reason", "checked the mail log",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["calls"] == [
        {"call_id": "c2", "name": "send_email", "run_id": "r2",
         "outcome": "bounced", "is_error": True}
    ]  # fmt: skip
    records, state = read_thread(root)
    assert state.tool_context.pending_calls == {}
    (reconciled,) = [e for e in records[-1].events if isinstance(e, ToolCallReconciled)]
    assert (reconciled.call_id, reconciled.is_error, reconciled.note) == (
        "c2",
        True,
        "checked the mail log",
    )
    # The run's story now ends with its verdict.
    code, out, _ = run(capsys, "--root", str(root), "log", PATH, "--run", "r2")
    assert "ToolCallReconciled" in out
    assert "RunInterrupted" in out
    code, out, _ = run(capsys, "--root", str(root), "--json", "ls")
    assert all(t["attention"] == [] for t in json.loads(out)["threads"])
    code, out, _ = run(capsys, "--root", str(root), "verify", PATH)
    assert code == 0


# --- export, then import -------------------------------------------------------------


def test_export_import_round_trip(root, tmp_path, capsys):
    exported = tmp_path / "s1.jsonl"
    assert run(capsys, "--root", str(root), "export", PATH, "-o", str(exported))[0] == 0
    other = tmp_path / "other"
    code, out, err = run(
        capsys, "--root", str(other), "import", PATH, "--from-export", str(exported)
    )
    assert code == 0, err
    assert "imported 7 records" in out
    original, state = read_thread(root)
    copied, copy_state = read_thread(other)
    assert [r.version for r in copied] == [r.version for r in original]
    assert [r.run_id for r in copied] == [r.run_id for r in original]
    assert copied[3].events == original[3].events
    copy_state.version = state.version
    assert copy_state == state
    assert run(capsys, "--root", str(other), "verify")[0] == 0
    # A thread that exists is refused, and nothing is written.
    code, _, err = run(
        capsys, "--root", str(other), "import", PATH, "--from-export", str(exported)
    )
    assert code == 1
    assert "already exists" in err
    assert len(read_thread(other)[0]) == 7
    # A file that is not an export is refused.
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"version": 2, "events": []}\n')
    code, _, err = run(
        capsys, "--root", str(other), "import", "a/b/c/d/e", "--from-export", str(bad)
    )
    assert code == 1
    assert "not 1" in err


# --- usage ---------------------------------------------------------------------------


def test_version_and_suggestions(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("agent-journal ")
    assert main(["lgo"]) == 2
    assert "did you mean 'log'?" in capsys.readouterr().err
    assert main(["log", "x/y/z/w/v", "--sesion", "s"]) == 2
    assert "did you mean --session?" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["export", "demo"])
def test_json_is_refused_where_nothing_is_printed(root, capsys, command):
    argv = [command, PATH] if command == "export" else [command]
    code, out, err = run(capsys, "--root", str(root), "--json", *argv)
    assert code == 2
    assert out == ""
    assert "--json does not apply" in err


def test_tables_fit_a_terminal_and_colour_only_there(root, capsys, monkeypatch):
    from journal.cli.app import Terminal
    from journal.cli.commands import show_log

    report = asyncio.run(_log_report(root, show_log))
    monkeypatch.delenv("NO_COLOR", raising=False)

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("TERM", "xterm")
    tty = Terminal(Tty())  # type: ignore[arg-type]
    text = tty.render(report)
    assert "\x1b[" in text  # colour
    plain = _strip(text).splitlines()
    assert max(len(line) for line in plain) <= 100
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in Terminal(Tty()).render(report)  # type: ignore[arg-type]
    # Captured output (not a terminal) is plain, and as wide as it needs.
    _, out, _ = run(capsys, "--root", str(root), "log", PATH)
    assert "\x1b" not in out
    assert max(len(line) for line in out.splitlines()) > 100


async def _log_report(root, show_log):
    journal = Journal.open(root, fsync=False)
    try:
        return await show_log(journal, LogOptions(root=str(root), key=KEY))
    finally:
        await journal.aclose()


def _strip(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_waiting_for_a_lease_shows_progress(root, capsys, monkeypatch):
    from tests.cli.test_commands import _Terminal

    async def hold() -> None:
        journal = Journal.open(root, fsync=False)
        writer = await journal.acquire(KEY, holder="brief", lease_ttl=2)
        from journal import RunStarted

        await writer.append([RunStarted("r3")], run_id="r3")
        # Abandoned: the lease runs out by itself.

    asyncio.run(hold())
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = main(["--root", str(root), "recover", PATH, "--wait", "20"])
    assert code == 0, terminal.getvalue()
    assert "waiting for the lease of 'brief'" in terminal.getvalue()
    assert (
        "unfinished run marked interrupted (by recovery): r3" in capsys.readouterr().out
    )


@pytest.fixture
def root(tmp_path):
    return build_root(tmp_path / "journal")
