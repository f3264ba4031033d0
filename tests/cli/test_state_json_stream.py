"""``state --json`` to a byte stream: the state's own JSON, written as it is encoded.

``AgentState.json_pieces`` splits :meth:`AgentState.to_json` into pieces (the
context a few hundred messages at a time) whose concatenation is the document
byte for byte; the CLI writes each piece as it comes, so a reader of a long
thread's state takes one piece while the next is encoded.
"""

from __future__ import annotations

import asyncio
import io
import sys
from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, TextBlock, ThreadKey
from journal.cli import main
from projections.agent_state import AgentState

if TYPE_CHECKING:
    from pathlib import Path

KEY = ThreadKey("bot", "s1", "alice")
THREAD = ["--agent", "bot", "--session", "s1", "--user", "alice"]

_TRICKY = ['"context":[]', "a\\", '\\"context\\":[]', "ünï\u2028", "", '{"x":1}']


def _states() -> list[AgentState]:
    out = []
    for n in (0, 1, 2, 3, 7):
        for i, text in enumerate(_TRICKY):
            messages = [
                Msg("user", f"{text} {k}")
                if k % 2
                else Msg("assistant", [TextBlock(text), TextBlock(str(k))])
                for k in range(n)
            ]
            out.append(
                AgentState(
                    session_id=text or None,
                    thread_id=f"t{i}",
                    user_id=text,
                    context=messages,
                    summary=text,
                    active_run_id=text,
                    version=n,
                )
            )
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 512])
def test_the_pieces_joined_are_the_document(size: int) -> None:
    for state in _states():
        pieces = list(state.json_pieces(size))
        assert b"".join(pieces) == state.to_json()
        if len(state.context) > size:
            assert len(pieces) > 3  # the context really comes in pieces
        assert AgentState.from_json(b"".join(pieces)) == state


def test_a_piece_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="messages must be >= 1, not 0"):
        next(AgentState().json_pieces(0))


class _Bytes(io.BytesIO):
    """A byte stream that counts the writes it gets."""

    writes = 0

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.writes += 1
        return super().write(data)


async def _long_thread(root: Path, messages: int) -> AgentState:
    journal = Journal.open(root, fsync=False)
    async with journal.writer(KEY, holder="t") as w:
        for i in range(0, messages, 100):
            await w.append(
                [MessageAppended(Msg("user", f"m{k}")) for k in range(i, i + 100)]
            )
    state = await journal.load(KEY)
    await journal.aclose()
    return state


def test_state_json_to_a_byte_stream_is_the_state_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = asyncio.run(_long_thread(tmp_path, 1300))
    binary = _Bytes()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(binary, encoding="utf-8"))
    assert main(["--root", str(tmp_path), "state", *THREAD, "--json"]) == 0
    sys.stdout.flush()
    assert binary.getvalue() == state.to_json() + b"\n"
    assert binary.writes > 5  # 1,300 messages: three pieces of them, and the rest
