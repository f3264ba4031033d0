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

from journal import ThreadKey, ToolCallReconciled
from journal.cli import ROOT_ENV, main
from journal.demo import DEMO_AGENT, DEMO_NAMESPACE, DEMO_USER
from tests.cli.test_commands import build_root, flip_byte, read_thread, record_file, run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "journal"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--root", str(root), "demo"])
    return root, code, out.getvalue(), err.getvalue()


def _demo_threads(root: Path) -> list[str]:
    return sorted(
        p.name for p in (root / DEMO_NAMESPACE / DEMO_AGENT / DEMO_USER).iterdir()
    )


def test_demo_exits_0_and_tells_the_story(demo_run):
    _, code, out, err = demo_run
    assert code == 0, err
    for text in (
        "[1/8]",
        "[8/8]",
        "RunStarted(run-1)",
        "MessageAppended(assistant, tool_use get_weather)",
        "ToolCallRequested(call-weather-1)",
        "ToolCallCompleted(call-weather-1)",
        "MessageAppended(tool, tool_result)",
        "RunCompleted(run-1)",
        "PermissionRuleSet(send_email=ask)",
        "TodosWritten(rev 1)",
        "checkpoint at v7",
        "SIGKILL pid",
        "RunInterrupted(run-3, by=recovery)",
        "send_email",
        "ToolCallReconciled(call-email-1)",
        "FencedError:",
        "mid-tool crash",
        "ok: 13 records",
        "agent-journal --root",
        "ls --namespace demo",
    ):
        assert text in out, text


def test_demo_leaves_a_thread_that_verifies_clean(demo_run, capsys):
    root, _, _, _ = demo_run
    (session,) = _demo_threads(root)
    key = ThreadKey(DEMO_AGENT, session, DEMO_USER, namespace=DEMO_NAMESPACE)
    records, state = read_thread(root, key)
    assert [r.version for r in records] == list(range(1, 14))
    assert [r.epoch for r in records] == [1] * 7 + [2] * 3 + [3] * 2 + [4]
    assert any(isinstance(e, ToolCallReconciled) for e in records[11].events)
    assert state.tool_context.pending_calls == {}
    assert state.shutdown_interrupted
    assert len(state.context) == 9

    code, out, _ = run(capsys, "--root", str(root), "verify", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["ok"] is True
    assert doc["threads"][0]["checkpoints"] == 1

    # The printed inspection commands work as printed.
    code, out, _ = run(capsys, "--root", str(root), "ls", "--namespace", "demo")
    assert code == 0
    assert session in out


def test_demo_reruns_do_not_collide(demo_run, capsys, monkeypatch):
    root, _, _, _ = demo_run
    monkeypatch.setenv(ROOT_ENV, str(root))  # the default root, from the environment
    code, _, _ = run(capsys, "demo")
    assert code == 0
    assert len(_demo_threads(root)) == 2
    code, _, _ = run(capsys, "verify", "--namespace", "demo")
    assert code == 0


def test_demo_refuses_a_memory_root(capsys):
    code, _, err = run(capsys, "--root", "memory://cli-demo", "demo")
    assert code == 2
    assert "another process" in err


# --- real processes: the entry point ------------------------------------------------


def _agent_journal(*argv: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "journal", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_python_dash_m_journal(tmp_path):
    root = build_root(tmp_path / "journal")
    done = _agent_journal("ls", "--json", env={ROOT_ENV: str(root)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["count"] == 2

    flip_byte(record_file(root, 2))
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
