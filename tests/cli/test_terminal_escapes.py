"""No escape sequence read from a store reaches a terminal.

Turn ids, turn errors, tool call ids and message text are the agent's (or a
client's) data: printed raw on a terminal they could retitle the window, clear
the screen or fake output. Text for a terminal shows each control character as
``?``; error lines (stderr) always do; JSON on a terminal escapes what JSON
encoders leave raw (DEL and the C1 controls, ``\\x9b`` being a CSI). Piped
output keeps the text as stored, as it always did.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey, ToolCallRequested
from journal.cli import main
from journal.turn_events import TurnFailed, TurnQueued
from tests.cli.test_commands import run

KEY = ThreadKey("bot", "s1", "alice")
PATH = "default/bot/alice/s1/main"
# A window title (OSC), a clear screen and a colour (CSI), an 8-bit CSI (C1) and DEL.
EVIL = "\x1b]0;owned-title\x07\x1b[2J\x1b[31mFAKE: all good\x1b[0m\x9b31m\x7f"
RAW = ("\x1b", "\x07", "\x9b", "\x7f")
SHOWN = "?]0;owned-title??[2J?[31mFAKE: all good?[0m?31m?"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def _write(root) -> None:
    journal = Journal.open(root, fsync=False)
    async with journal.writer(KEY, holder="w") as w:
        await w.append([MessageAppended(Msg("user", "hi " + EVIL))])
        await w.append([TurnQueued("turn-1" + EVIL)])
        await w.append([TurnFailed("turn-1" + EVIL, error="boom " + EVIL)])
        # Requested in a run that never started here: an uncertain call.
        await w.append(
            [ToolCallRequested("call-" + EVIL, "send_email", {})], run_id="r1"
        )
    await journal.aclose()


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "journal"
    asyncio.run(_write(path))
    return path


def on_terminal(monkeypatch, *argv: str) -> tuple[int, str]:
    """Run the CLI with stdout a terminal; ``(status, what it showed)``."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setenv("COLUMNS", "400")  # no folding of the lines checked
    monkeypatch.setenv("NO_COLOR", "1")  # colour is the CLI's own escapes
    code = main(list(argv))
    return code, terminal.getvalue()


def assert_clean(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text)


def test_turns_on_a_terminal_shows_no_escape(root, capsys, monkeypatch):
    code, shown = on_terminal(monkeypatch, "--root", str(root), "turns")
    assert code == 0
    assert_clean(shown)
    assert f"turn-1{SHOWN}" in shown
    assert f"boom {SHOWN}" in shown


def test_turns_piped_keeps_the_text_as_stored(root, capsys):
    code, out, _ = run(capsys, "--root", str(root), "turns")
    assert code == 0
    assert f"turn-1{EVIL}" in out


def test_an_error_line_quoting_store_data_shows_no_escape(root, capsys):
    # reconcile names the thread's uncertain calls: one id is the agent's.
    code, out, err = run(
        capsys, "--root", str(root),
        "reconcile", PATH, "--call", "x=done", "--reason", "r",
    )  # fmt: skip
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert_clean(err)
    assert f"call-{SHOWN}" in err


@pytest.mark.parametrize(
    "argv",
    [["--json", "log", PATH], ["--json", "state", PATH], ["export", PATH]],
    ids=["log --json", "state --json", "export"],
)
def test_json_on_a_terminal_escapes_what_encoders_leave_raw(
    root, capsys, monkeypatch, argv
):
    code, piped, _ = run(capsys, "--root", str(root), *argv)
    assert code == 0
    assert "\x9b" in piped  # JSON may hold it raw: a pipe gets the bytes as encoded
    code, shown = on_terminal(monkeypatch, "--root", str(root), *argv)
    assert code == 0
    assert_clean(shown)
    # Still the same JSON values.
    decode = [json.loads(line) for line in piped.splitlines()]
    if argv[0] == "export":
        assert [json.loads(line) for line in shown.splitlines()] == decode
    else:
        assert json.loads(shown) == decode[0]


def test_log_follow_json_on_a_terminal_escapes_too(root, capsys, monkeypatch):
    argv = ["--root", str(root), "--json", "log", PATH, "--follow", "--limit", "5"]
    code, piped, _ = run(capsys, *argv)
    assert code == 0
    assert "\x9b" in piped
    code, shown = on_terminal(monkeypatch, *argv)
    assert code == 0
    assert_clean(shown)
    assert [json.loads(line) for line in shown.splitlines()] == [
        json.loads(line) for line in piped.splitlines()
    ]


def test_log_on_a_terminal_still_shows_no_escape(root, monkeypatch):
    code, shown = on_terminal(monkeypatch, "--root", str(root), "log", PATH)
    assert code == 0
    assert_clean(shown)
    assert f"hi {SHOWN}" in shown
