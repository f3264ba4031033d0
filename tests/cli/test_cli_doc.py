"""docs/CLI.md, followed command by command on the demo's incident.

Every ``agent-journal`` line of the page's ``sh`` blocks runs in order (``$T`` being
the thread ``ls --attention`` names), and the outputs are checked to answer: what
did the agent do in run alice-3, what did the state look like before it, which tool
call is uncertain, and settle it.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from journal import ToolCallReconciled
from journal.cli import main
from tests.cli.test_commands import read_thread

DOC = Path(__file__).resolve().parents[2] / "docs" / "CLI.md"


def _commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    lines = [line for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("agent-journal")]


def _run(capsys, root: Path, argv: list[str]) -> tuple[int, str, str]:
    code = main(["--root", str(root), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_doc_answers_the_operators_questions(tmp_path, capsys):
    root = tmp_path / "journal"
    commands = _commands()
    assert [c[0] for c in commands] == [
        "demo", "ls", "runs", "log", "state", "diff", "recover", "reconcile",
        "runs", "verify",
    ]  # fmt: skip
    outputs: list[str] = []
    thread = None
    for argv in commands:
        if argv[0] == "ls":
            code, out, _ = _run(capsys, root, [*argv, "--json"])
            (found,) = json.loads(out)["threads"]
            thread = "/".join(
                [found["namespace"], found["agent_id"], found["user_id"],
                 found["session_id"], found["thread_id"]]
            )  # fmt: skip
        argv = [thread if a == "$T" else a for a in argv]
        code, out, err = _run(capsys, root, argv)
        assert code == 0, (argv, err)
        outputs.append(out)
    (demo, ls, runs, log, state, diff, recover, reconcile, runs_after, verify) = outputs
    assert "Stopped after the crash" in demo

    # Which thread needs attention, and why.
    assert "unfinished run alice-3; 1 uncertain call (call-email-1)" in ls

    # Which tool call is uncertain: the run ledger says so, and when the run began.
    row = next(line for line in runs.splitlines() if line.startswith("alice-3"))
    assert row.split()[:3] == ["alice-3", "unfinished", "8"]  # as the doc says
    call = next(line for line in runs.splitlines() if "call-email-1" in line)
    assert "send_email" in call
    assert "uncertain" in call

    # What the agent did in run alice-3: its request, the write-ahead call, no result.
    assert "run alice-3" in log.splitlines()[0]
    assert "user: Email Bob the forecast." in log
    assert "ToolCallRequested" in log
    assert "call call-email-1: send_email" in log
    assert "ToolCallCompleted" not in log
    body = log.splitlines()[2:]
    assert body
    assert all(" alice-3 " in line for line in body)

    # The state before the run: no active run, nothing pending; the diff shows
    # what the run changed.
    assert "version 7 (head 9)" in state
    assert re.search(r"^active run\s+-$", state, flags=re.MULTILINE)
    assert re.search(r"^pending calls\s+-$", state, flags=re.MULTILINE)
    assert "active_run_id" in diff
    assert '"alice-3"' in diff
    assert "tool_context.pending_calls.call-email-1" in diff
    assert "context: +2 / -0 messages" in diff

    # Recovery marked the run interrupted and re-ran nothing; the verdict settled it.
    assert "unfinished run marked interrupted (by recovery): alice-3" in recover
    assert "nothing was re-run" in recover
    assert "1 tool call reconciled" in reconcile
    call = next(line for line in runs_after.splitlines() if "call-email-1" in line)
    assert "reconciled" in call
    assert "uncertain:" not in runs_after
    assert "1 ok, 0 with problems" in verify

    records, state_now = read_thread(root, _key(thread))
    (verdict,) = [
        e for r in records for e in r.events if isinstance(e, ToolCallReconciled)
    ]
    assert (verdict.call_id, verdict.is_error, verdict.note) == (
        "call-email-1",
        True,
        "checked the outbox",
    )
    assert state_now.tool_context.pending_calls == {}
    code, out, _ = _run(capsys, root, ["ls", "--attention"])
    assert "no threads need attention" in out
    # Recovering again writes nothing.
    code, out, _ = _run(capsys, root, ["recover", thread])
    assert "nothing to recover" in out
    assert len(read_thread(root, _key(thread))[0]) == len(records)


def _key(path: str):
    from journal.cli.names import parse_thread_path

    return parse_thread_path(path).key()
