"""``agent-journal demo`` and the entry points, in-process and as real processes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from journal import (
    ContextCleared,
    LeaseAcquired,
    RunCompleted,
    RunInterrupted,
    RunStarted,
    ThreadKey,
    ToolCallCompleted,
    ToolCallReconciled,
    ToolCallRequested,
)
from journal.cli import ROOT_ENV, main
from journal.cli.demo import DEMO_AGENT, DEMO_NAMESPACE, DEMO_USER, DEMO_USERS, STEPS
from projections import RunLedger, fold
from tests.cli.test_commands import build_root, flip_record, read_thread, run

REPO = Path(__file__).resolve().parents[2]

HEADLINES = (
    "Two users, one tool call each, through Agent.call",
    "alice's second turn, on a FRESH Agent: the journal is the session",
    "A checkpoint",
    "A crash in the middle of a tool: the Agent's PROCESS is killed",
    "Recovery on a new Agent: interrupted, uncertain, reconciled",
    "A zombie worker is fenced by epoch",
    "clear_context: the messages go, the rest stays, the log keeps all",
    "Time travel: alice's state rebuilt as of any version",
    "verify: every thread of this run",
)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "journal"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--root", str(root), "demo"])
    return root, code, out.getvalue(), err.getvalue()


def _sessions(root: Path, user: str) -> list[str]:
    return sorted(p.name for p in (root / DEMO_NAMESPACE / DEMO_AGENT / user).iterdir())


def _key(root: Path, user: str) -> ThreadKey:
    (session,) = _sessions(root, user)
    return ThreadKey(DEMO_AGENT, session, user, namespace=DEMO_NAMESPACE)


def _events(records, kind):
    return [(r, e) for r in records for e in r.events if isinstance(e, kind)]


def test_demo_exits_0_and_tells_the_story(demo_run):
    _, code, out, err = demo_run
    assert code == 0, err
    assert "Traceback" not in out + err
    assert len(HEADLINES) == STEPS
    for number, headline in enumerate(HEADLINES, 1):
        assert f"[{number}/{STEPS}] {headline}" in out, headline
    for text in (
        # 1: two users; the runtime's records, write-ahead
        "RunStarted(alice-1) + MessageAppended(user)",
        "MessageAppended(assistant, tool_use get_weather) + "
        "ToolCallRequested(call-weather-a1)",
        "ToolCallCompleted(call-weather-a1, tool_result message)",
        "MessageAppended(assistant) + RunCompleted(alice-1)",
        "RunCompleted(bob-1)",
        "-> alice gets: 18 C and sunny in Paris.",
        "-> bob gets: 9 C and rain in Oslo.",
        # 2: a fresh Agent continues the session
        "the model saw 5 messages: user, assistant, tool, assistant, user",
        "PermissionRuleSet(send_email=allow)",
        "TodosWritten(rev 1)",
        # 3
        "checkpoint of alice's thread at v7",
        # 4: the crash
        "ToolCallRequested(call-email-1)",
        "SIGKILL",
        # 5: recovery
        "RunInterrupted(alice-3, by=recovery, reason=recovered)",
        "shutdown_interrupted=True",
        'call-email-1: send_email {"to": "bob@example.com"',
        "UncertainToolCallsError:",
        "the model was called 0 times",
        "ToolCallReconciled(call-email-1)",
        "ToolCallRequested(call-email-2)",
        "-> alice gets: Sent this time.",
        # 6: the zombie
        "RunInterrupted(bob-2, by=recovery, reason=recovered)",
        "FencedError:",
        "ToolCallReconciled(call-email-b1)",
        # 7-9
        "ContextCleared",
        "mid-tool crash",
        "agent-journal --root",
        "ls --namespace demo",
        "verify --namespace demo",
    ):
        assert text in out, text


def test_demo_leaves_threads_that_verify_clean(demo_run, capsys):
    root, _, out, _ = demo_run
    for user in DEMO_USERS:
        records, _ = read_thread(root, _key(root, user))
        assert [r.version for r in records] == list(range(1, len(records) + 1))
        epochs = [r.epoch for r in records]
        assert epochs == sorted(epochs)
    assert out.count(" ok\n") == len(DEMO_USERS)

    code, printed, _ = run(capsys, "--root", str(root), "verify", "--json")
    assert code == 0
    doc = json.loads(printed)
    assert doc["ok"] is True
    assert len(doc["threads"]) == len(DEMO_USERS)

    # The printed inspection commands work as printed.
    code, printed, _ = run(capsys, "--root", str(root), "ls", "--namespace", "demo")
    assert code == 0
    assert _key(root, DEMO_USER).session_id in printed


def test_the_two_users_threads_are_separate(demo_run):
    root, _, _, _ = demo_run
    alice = _key(root, "alice")
    bob = _key(root, "bob")
    assert alice.session_id == bob.session_id
    alice_records, _ = read_thread(root, alice)
    bob_records, _ = read_thread(root, bob)
    assert {r.run_id for r in alice_records} & {r.run_id for r in bob_records} == {None}
    assert [e.run_id for _, e in _events(bob_records, RunStarted)] == [
        "bob-1",
        "bob-2",
    ]


def test_the_crashed_run_is_recovered_and_its_call_reconciled(demo_run):
    root, _, _, _ = demo_run
    records, state = read_thread(root, _key(root, DEMO_USER))

    # The crashed run: requested (write-ahead), never completed.
    (request,) = [
        (r, e) for r, e in _events(records, ToolCallRequested) if e.run_id == "alice-3"
    ]
    assert request[1].call_id == "call-email-1"
    completed = {e.call_id for _, e in _events(records, ToolCallCompleted)}
    assert "call-email-1" not in completed

    # The next lease holder's fence record carries the recovery.
    ((fence, interrupted),) = _events(records, RunInterrupted)
    assert (interrupted.run_id, interrupted.by, interrupted.reason) == (
        "alice-3",
        "recovery",
        "recovered",
    )
    assert any(isinstance(e, LeaseAcquired) for e in fence.events)
    assert fence.version > request[0].version

    # The refused call committed nothing; reconciliation came before the next
    # run, which sent the email again as a new call.
    ((reconciled_at, reconciled),) = _events(records, ToolCallReconciled)
    assert reconciled.call_id == "call-email-1"
    assert reconciled.is_error
    # The record right after the recovery is the reconciliation.
    assert records[fence.version].version == reconciled_at.version
    (rerun,) = [r for r, e in _events(records, RunStarted) if e.run_id == "alice-4"]
    assert rerun.version > reconciled_at.version
    assert "call-email-2" in completed
    assert [e.run_id for _, e in _events(records, RunCompleted)] == [
        "alice-1",
        "alice-2",
        "alice-4",
    ]

    ledger = RunLedger.finish(fold(RunLedger(), {}, records))
    assert ledger["alice-3"].status == "interrupted"
    assert [c.outcome for c in ledger["alice-3"].tool_calls] == ["reconciled"]
    assert RunLedger.uncertain(ledger) == []

    # clear_context: the messages went, the rest stayed.
    assert isinstance(records[-1].events[-1], ContextCleared)
    assert state.context == []
    assert state.tool_context.pending_calls == {}
    assert state.permission_context.rules == {
        "get_weather": "allow",
        "send_email": "allow",
    }
    assert len(state.tasks_context.todos) == 2
    assert state.tool_context.active_groups == ["email"]
    assert not state.shutdown_interrupted


def test_the_zombies_result_never_landed(demo_run):
    root, _, _, _ = demo_run
    records, state = read_thread(root, _key(root, "bob"))
    ((_, interrupted),) = _events(records, RunInterrupted)
    assert (interrupted.run_id, interrupted.by) == ("bob-2", "recovery")
    completed = {e.call_id for _, e in _events(records, ToolCallCompleted)}
    assert "call-email-b1" not in completed
    ((_, reconciled),) = _events(records, ToolCallReconciled)
    assert reconciled.call_id == "call-email-b1"
    assert not reconciled.is_error
    assert "sent to alice@example.com" in reconciled.resolution
    assert state.tool_context.pending_calls == {}


def test_demo_reruns_do_not_collide(demo_run, capsys, monkeypatch):
    root, _, _, _ = demo_run
    monkeypatch.setenv(ROOT_ENV, str(root))  # the default root, from the environment
    code, _, _ = run(capsys, "demo")
    assert code == 0
    for user in DEMO_USERS:
        assert len(_sessions(root, user)) == 2
    code, _, _ = run(capsys, "verify", "--namespace", "demo")
    assert code == 0


def test_demo_refuses_a_memory_root(capsys):
    code, _, err = run(capsys, "--root", "memory://cli-demo", "demo")
    assert code == 2
    assert "another process" in err


# --- real processes: the entry point ------------------------------------------------


def _agent_journal(
    *argv: str, env: dict[str, str] | None = None, cwd: Path = REPO, timeout=60
):
    return subprocess.run(
        [sys.executable, "-m", "journal", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_python_dash_m_journal_demo_from_another_directory(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _agent_journal(
        "demo", env={ROOT_ENV: str(tmp_path / "journal")}, cwd=elsewhere, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert f"[{STEPS}/{STEPS}] verify" in done.stdout
    assert "SIGKILL" in done.stdout
    done = _agent_journal(
        "--root", str(tmp_path / "journal"), "verify", "--namespace", "demo"
    )
    assert done.returncode == 0, done.stdout


def test_python_dash_m_journal(tmp_path):
    root = build_root(tmp_path / "journal")
    done = _agent_journal("ls", "--json", env={ROOT_ENV: str(root)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["count"] == 2

    flip_record(root, 2)
    done = _agent_journal("--root", str(root), "verify")
    assert done.returncode == 1
    assert "FAIL" in done.stdout

    done = _agent_journal("--root", str(root), "log", "--agent", "bot")
    assert done.returncode == 2
    assert "--session" in done.stderr

    done = _agent_journal(
        "--root",
        str(root),
        "log",
        "--agent",
        "bot",
        "--session",
        "s1",
        "--user",
        "alice",
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1
