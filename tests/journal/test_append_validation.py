"""An append readers would refuse is refused at the append; the thread stays usable.

A record the writer commits must always be readable back: before, a ``Msg`` with
``bytes`` content, an unknown role, a ``None`` id, a tool input nested 980 levels deep
or a non-string ``batch_id`` were committed and then refused by every reader (load,
verify and the CLI, some with a ``RecursionError`` traceback), so the thread could
never be loaded or written again. Each hostile append below must raise a clear error
naming the event, the field and the value's type, commit nothing, and leave the
thread writable, loadable, verifiable and readable from the command line.

Each test runs on the memory store and on the local store.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from journal import (
    CorruptRecordError,
    InvalidEventError,
    Journal,
    MessageAppended,
    Msg,
    TextBlock,
    ThreadKey,
    ToolCallRequested,
    ToolUseBlock,
    UnknownEvent,
)
from journal import codec as jcodec
from journal.cli import main as cli_main
from journal.codec import MAX_NESTING

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Where:
    """A journal's URL and a key for one thread in it."""

    url: str
    key: ThreadKey

    def open(self) -> Journal:
        return Journal.open(self.url, checkpoint_every=0)

    def cli(self, command: str) -> int:
        k = self.key
        return cli_main(
            [
                command,
                "--root",
                self.url,
                "--agent",
                k.agent_id,
                "--session",
                k.session_id,
            ]
        )


@pytest.fixture(params=["memory", "local"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    key = ThreadKey("validate-agent", f"s-{uuid.uuid4().hex[:12]}")
    if request.param == "memory":
        return Where(f"memory://validate-{uuid.uuid4().hex}", key)
    return Where(str(tmp_path / "journal"), key)


def nested(levels: int) -> Any:
    """A JSON-like value of ``levels`` nested lists."""
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text))


def message(content: Any = "hi", **fields: Any) -> list[object]:
    msg = Msg("user", "placeholder")
    # Msg is not validated on construction; these bypass nothing a caller cannot do.
    msg.content = content
    for name, value in fields.items():
        setattr(msg, name, value)
    return [say("fine first"), MessageAppended(msg)]


def tool_call(value: Any) -> list[object]:
    return [ToolCallRequested("call-1", "search", value)]


def tool_block(value: Any) -> list[object]:
    blocks = [TextBlock("calling"), ToolUseBlock("call-1", "search", value)]
    return [MessageAppended(Msg("assistant", blocks))]


class Opaque:
    """A value msgspec cannot encode."""


# (events, append keywords, expected error, fragments the message must contain)
HOSTILE: list[Any] = [
    pytest.param(
        lambda: message(b"raw bytes"),
        {},
        InvalidEventError,
        ["events[1]", "MessageAppended", ".message.content", "bytes"],
        id="msg-content-bytes",
    ),
    pytest.param(
        lambda: message(42),
        {},
        InvalidEventError,
        ["events[1]", "MessageAppended", ".message.content", "int"],
        id="msg-content-int",
    ),
    pytest.param(
        lambda: message(role="robot"),
        {},
        InvalidEventError,
        ["events[1]", ".message.role", "'robot'", "str"],
        id="msg-role-unknown",
    ),
    pytest.param(
        lambda: message(id=None),
        {},
        InvalidEventError,
        ["events[1]", ".message.id", "NoneType"],
        id="msg-id-none",
    ),
    pytest.param(
        lambda: message(metadata={"k": Opaque()}),
        {},
        InvalidEventError,
        ["events[1]", ".message.metadata", "Opaque"],
        id="msg-metadata-unencodable",
    ),
    pytest.param(
        lambda: tool_call(nested(980)),
        {},
        InvalidEventError,
        ["events[0]", "ToolCallRequested", ".input", f"deeper than {MAX_NESTING}"],
        id="tool-input-980-deep",
    ),
    pytest.param(
        lambda: tool_block({"q": nested(980)}),
        {},
        InvalidEventError,
        ["events[0]", ".message.content[1].input", f"deeper than {MAX_NESTING}"],
        id="tool-use-block-input-980-deep",
    ),
    pytest.param(
        lambda: tool_call(nested(MAX_NESTING)),
        {},
        InvalidEventError,
        ["events[0]", ".input", f"deeper than {MAX_NESTING}"],
        id="tool-input-one-level-too-deep",
    ),
    pytest.param(
        lambda: tool_call({"x": [1.0, float("nan")]}),
        {},
        InvalidEventError,
        ["events[0]", ".input", "NaN", "float"],
        id="tool-input-nan",
    ),
    pytest.param(
        lambda: tool_call({"n": 2**70}),
        {},
        InvalidEventError,
        ["events[0]", ".input", "int"],
        id="tool-input-int-beyond-64-bits",
    ),
    pytest.param(
        lambda: tool_block(Opaque()),
        {},
        InvalidEventError,
        ["events[0]", ".message.content[1].input", "Opaque"],
        id="tool-use-block-input-unencodable",
    ),
    pytest.param(
        lambda: [UnknownEvent("FromTheFuture", 1, False, b"\xc1")],
        {},
        InvalidEventError,
        ["events[0]", "FromTheFuture", "data"],
        id="unknown-event-garbage-bytes",
    ),
    pytest.param(
        lambda: [UnknownEvent(7, 1, False, b"\xc0")],  # type: ignore[arg-type]
        {},
        InvalidEventError,
        ["events[0]", ".type", "int"],
        id="unknown-event-non-str-type",
    ),
    pytest.param(
        lambda: [say("hello")],
        {"batch_id": 17},
        TypeError,
        ["batch_id", "int"],
        id="batch-id-int",
    ),
    pytest.param(
        lambda: [say("hello")],
        {"batch_id": b"bytes"},
        TypeError,
        ["batch_id", "bytes"],
        id="batch-id-bytes",
    ),
    pytest.param(
        lambda: [say("hello")],
        {"batch_id": ""},
        ValueError,
        ["batch_id", "empty"],
        id="batch-id-empty",
    ),
    pytest.param(
        lambda: [say("hello")],
        {"batch_id": "b" * 1000},
        ValueError,
        ["batch_id", "256"],
        id="batch-id-too-long",
    ),
    pytest.param(
        lambda: [say("hello")],
        {"run_id": 5},
        TypeError,
        ["run_id", "int"],
        id="run-id-int",
    ),
    pytest.param(
        lambda: [say("hello")],
        {"run_id": ""},
        ValueError,
        ["run_id", "empty"],
        id="run-id-empty",
    ),
]


async def _hostile_append(
    where: Where,
    make: Callable[[], list[object]],
    kwargs: dict[str, Any],
    error: type[Exception],
    fragments: list[str],
) -> None:
    journal = where.open()
    async with journal.writer(where.key, holder="validator") as w:
        await w.append([say("before")])
        head = w.version
        with pytest.raises(error) as info:
            await w.append(make(), **kwargs)
        text = str(info.value)
        for fragment in fragments:
            assert fragment in text, (fragment, text)
        assert w.version == head
        assert await journal.head(where.key) == head
        # The thread stays writable: the next good append commits right after.
        record = await w.append([say("after")], batch_id="good-batch")
        assert record.version == head + 1
    reopened = where.open()
    assert await reopened.head(where.key) == head + 1
    state = await reopened.load(where.key)
    assert [m.text for m in state.context][-2:] == ["before", "after"]
    report = await reopened.verify(where.key)
    assert report.ok, report
    # A new writer can take the thread over and append.
    async with reopened.writer(where.key, holder="next") as w2:
        await w2.append([say("later")])


@pytest.mark.parametrize(("make", "kwargs", "error", "fragments"), HOSTILE)
def test_hostile_append_is_refused_and_thread_stays_usable(
    where: Where,
    make: Callable[[], list[object]],
    kwargs: dict[str, Any],
    error: type[Exception],
    fragments: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(_hostile_append(where, make, kwargs, error, fragments))
    capsys.readouterr()
    for command in ("verify", "log", "state"):
        assert where.cli(command) == 0, capsys.readouterr()
    assert "Traceback" not in capsys.readouterr().err


def test_invalid_event_error_is_a_value_error() -> None:
    assert issubclass(InvalidEventError, ValueError)


# --- values readers accept are accepted, and the writer sees what readers see -------


# (a tool call's input, a ToolUseBlock's input). The event is level 1: a tool call's
# input is at level 2, a ToolUseBlock's (event, message, content list, block) at 5.
ACCEPTED: list[Any] = [
    pytest.param(
        nested(MAX_NESTING - 1), nested(MAX_NESTING - 4), id="deepest-allowed"
    ),
    pytest.param({1: "int key", b"k": "bytes key"}, {2: "x"}, id="non-str-keys"),
    pytest.param({"point": (1, 2)}, ("a", ("b",)), id="tuple"),
    pytest.param({"big": 2**64 - 1, "small": -(2**63)}, [2**64 - 1], id="64-bit-edges"),
    pytest.param({"inf": float("inf")}, float("-inf"), id="infinity"),
]


async def _accepted(where: Where, value: Any, block_value: Any) -> None:
    journal = where.open()
    async with journal.writer(where.key, holder="validator") as w:
        await w.append(tool_call(value))
        await w.append(tool_block(block_value))
        local = w.state.tool_context.pending_calls["call-1"].input
        # A state change is diffed against a copy: it must see no change here.
        assert await w.update("noop", lambda s: None) is None
    loaded = await where.open().load(where.key)
    assert loaded.tool_context.pending_calls["call-1"].input == local
    assert loaded.context[-1] == w.state.context[-1]
    assert (await where.open().verify(where.key)).ok


@pytest.mark.parametrize(("value", "block_value"), ACCEPTED)
def test_values_readers_accept_commit_and_read_back(
    where: Where, value: Any, block_value: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_accepted(where, value, block_value))
    for command in ("verify", "log", "state"):
        assert where.cli(command) == 0, capsys.readouterr()


# --- a record committed before validation existed ----------------------------------


def deep_tool_call_bytes(levels: int) -> bytes:
    """A ToolCallRequested's bytes with an input of ``levels`` nested lists.

    Built by hand: encoding so deep a value would itself exceed the recursion limit.
    """
    marker = "@@deep@@"
    data = msgspec.msgpack.encode(ToolCallRequested("call-1", "search", marker))
    deep = b"\x91" * levels + msgspec.msgpack.encode("leaf")
    return data.replace(msgspec.msgpack.encode(marker), deep)


async def _plant_deep_record(where: Where, levels: int) -> int:
    """Commit a good thread, then publish a too-deep record as an old writer would."""
    journal = where.open()
    async with journal.writer(where.key, holder="old-writer") as w:
        await w.append([say("good")])
        version, prev, epoch = w.version + 1, w._head_hash, w.epoch
        event = UnknownEvent("ToolCallRequested", 1, True, deep_tool_call_bytes(levels))
        encoded = jcodec.encode_record(
            version=version,
            epoch=epoch,
            writer="old-writer",
            batch_id="old-batch",
            run_id=None,
            committed_at=0.0,
            prev_hash=prev,
            events=[event],
            validate=False,
        )
        await w.log.publish(encoded, version)
    return version


def test_a_deeper_record_that_decodes_is_still_read_back(
    where: Where, capsys: pytest.CaptureFixture[str]
) -> None:
    """Old data deeper than appends now allow, but decodable, stays readable."""

    async def check() -> None:
        bad = await _plant_deep_record(where, 200)
        journal = where.open()
        state = await journal.load(where.key)
        assert state.version == bad
        pending = state.tool_context.pending_calls["call-1"].input
        for _ in range(200):
            pending = pending[0]
        assert pending == "leaf"
        assert (await journal.verify(where.key)).ok

    asyncio.run(check())
    for command in ("verify", "log", "state"):
        assert where.cli(command) == 0, capsys.readouterr()


@pytest.mark.parametrize("levels", [980, 5000])
def test_a_too_deep_record_already_committed_is_a_clear_corruption(
    where: Where, levels: int, capsys: pytest.CaptureFixture[str]
) -> None:
    async def check() -> int:
        bad = await _plant_deep_record(where, levels)
        journal = where.open()
        with pytest.raises(CorruptRecordError) as info:
            await journal.load(where.key)
        assert info.value.version == bad
        assert "nested too deeply" in str(info.value)
        report = await journal.verify(where.key)
        assert not report.ok
        assert any(f.version == bad for f in report.problems), report
        return bad

    bad = asyncio.run(check())
    capsys.readouterr()
    for command in ("verify", "log", "state"):
        code = where.cli(command)
        captured = capsys.readouterr()
        assert code == 1, (command, captured)
        assert "Traceback" not in captured.err
        assert f"version {bad}" in captured.out + captured.err, (command, captured)


def test_a_too_deep_record_never_gives_a_traceback_from_the_cli(
    tmp_path: Path,
) -> None:
    """In a fresh process, whose stack depth differs from pytest's."""
    where = Where(str(tmp_path / "journal"), ThreadKey("deep-agent", "s1"))
    bad = asyncio.run(_plant_deep_record(where, 980))
    for command in ("verify", "log", "state"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "journal",
                command,
                "--root",
                where.url,
                "--agent",
                "deep-agent",
                "--session",
                "s1",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert done.returncode == 1, (command, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        assert "RecursionError" not in done.stderr + done.stdout
        assert f"version {bad}" in done.stderr + done.stdout, (command, done.stdout)
