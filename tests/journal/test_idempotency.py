"""A retried batch lands once across checkpoints, restarts and retention.

The writer's process dies after its commit of batch ``B`` landed but before it saw
the acknowledgement; a new process takes the thread over and retries ``B``. The
checkpoint a rebuild starts from must remember ``B`` (within the documented window,
:data:`journal.engine.batches.IDEMPOTENCY_WINDOW` records), or the retry is written
a second time.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey, codec
from journal.engine.batches import ENTRY_SIZE, IDEMPOTENCY_WINDOW, BatchWindow
from journal.engine.log import ThreadLog
from tests.journal._procs import Child

if TYPE_CHECKING:
    from pathlib import Path

Opener = Callable[..., Journal]


@pytest.fixture(params=["local", "memory"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a new journal object over the same storage at each call."""
    url = (
        str(tmp_path / "root")
        if request.param == "local"
        else (f"memory://idempotency-{uuid.uuid4().hex}")
    )

    def open_journal(checkpoint_every: int = 0) -> Journal:
        return Journal.open(url, checkpoint_every=checkpoint_every)

    return open_journal


def say(text: str) -> MessageAppended:
    # A fixed message id: a retry rebuilds the same events from the same input.
    return MessageAppended(Msg("assistant", text, id=f"m-{text}"))


def new_key() -> ThreadKey:
    return ThreadKey("agent", f"s-{uuid.uuid4().hex[:8]}", user_id="u")


async def batch_ids(j: Journal, key: ThreadKey, start: int = 1) -> list[str]:
    return [r.batch_id async for r in j.records(key, start)]


async def commit_lost_ack(
    j: Journal, key: ThreadKey, batch: str, before: int = 2
) -> int:
    """Commit ``before`` records, then ``batch``, as if its acknowledgement was lost.

    Returns:
        The version ``batch`` landed at.
    """
    async with j.writer(key, holder="first") as w:
        for i in range(before):
            await w.append([say(f"before {i}")], batch_id=f"before-{i}")
        rec = await w.append([say("the batch")], batch_id=batch)
        return rec.version


async def retry(j: Journal, key: ThreadKey, batch: str, text: str = "the batch"):
    async with j.writer(key, holder="second") as w:
        head = w.version
        rec = await w.append([say(text)], batch_id=batch)
        assert w.version == head, "the retry wrote a record"
        return rec


async def test_retry_after_reader_checkpoint(opener: Opener):
    key = new_key()
    version = await commit_lost_ack(opener(), key, "B")
    reader = opener()
    assert await reader.checkpoint(key) == version
    j = opener()
    head = await j.head(key)
    rec = await retry(j, key, "B")
    assert rec.version == version
    assert rec.batch_id == "B"
    assert await j.head(key) == head + 1  # only the second writer's fence
    assert (await batch_ids(j, key)).count("B") == 1
    assert (await j.verify(key)).ok


async def test_retry_after_killed_child_and_reader_checkpoint(tmp_path: Path):
    root = tmp_path / "root"
    key = new_key()
    child = Child("crash", root, key, 0, 0)
    try:
        child.wait_for("ACK", 3)
        child.kill()
        assert child.finish() == -signal.SIGKILL, child.stderr()
    finally:
        child.close()
    acked = child.acks()
    batch, version = "r0-1", acked["r0-1"]
    reader = Journal.open(str(root), checkpoint_every=0)
    head = await reader.checkpoint(key)
    assert head > version
    j = Journal.open(str(root), checkpoint_every=0)
    # The child's events, as its application would build them again.
    events = [r.events async for r in j.records(key) if r.batch_id == batch]
    assert len(events) == 1
    async with j.writer(key, holder="crasher") as w:
        fenced = w.version
        rec = await w.append(events[0], batch_id=batch)
        assert (rec.version, w.version) == (version, fenced)
    assert (await batch_ids(j, key)).count(batch) == 1


async def test_retry_after_background_checkpoints(opener: Opener):
    key = new_key()
    j = opener(checkpoint_every=3)
    async with j.writer(key, holder="first") as w:
        rec = await w.append([say("the batch")], batch_id="B")
        for i in range(40):
            await w.append([say(f"after {i}")], batch_id=f"after-{i}")
    j2 = opener(checkpoint_every=3)
    report = await j2.verify(key)
    # The writer's own checkpoints: the next rebuild starts far past B.
    assert report.ok
    assert report.checkpoints >= 5
    again = await retry(opener(checkpoint_every=3), key, "B")
    assert again.version == rec.version
    assert (await batch_ids(j2, key)).count("B") == 1


async def test_retry_after_retention(opener: Opener):
    key = new_key()
    j = opener()
    version = await commit_lost_ack(j, key, "B")
    async with j.writer(key, holder="first") as w:
        for i in range(5):
            await w.append([say(f"after {i}")], batch_id=f"after-{i}")
        await w.checkpoint()
    marker = await j.retain(key, window=0)
    assert marker is not None
    assert marker.checkpoint > version
    j2 = opener()
    head = await j2.head(key)
    rec = await retry(j2, key, "B")
    # The original record is gone: what the retry learns is its version and batch.
    assert (rec.version, rec.batch_id) == (version, "B")
    assert await j2.head(key) == head + 1
    assert "B" not in await batch_ids(j2, key, marker.first_retained)
    with pytest.raises(ValueError, match=rf"'B'.*version {version}"):
        await retry(opener(), key, "B", text="other events")


async def test_retry_after_restarts_and_checkpoints(opener: Opener):
    key = new_key()
    version = await commit_lost_ack(opener(), key, "B")
    first = 1
    for round_ in range(6):
        j = opener(checkpoint_every=2)
        async with j.writer(key, holder=f"round-{round_}") as w:
            for i in range(round_ % 3):
                await w.append([say(f"{round_}-{i}")], batch_id=f"x-{round_}-{i}")
            if round_ % 2:
                await w.checkpoint()
        await opener().checkpoint(key)
        if round_ == 3:
            marker = await opener().retain(key, window=0)
            assert marker is not None
            first = marker.first_retained
    rec = await retry(opener(), key, "B")
    assert rec.version == version
    j = opener()
    assert first > version
    assert "B" not in await batch_ids(j, key, first)  # retention removed it
    state = await j.load(key)
    assert [m.text for m in state.context].count("the batch") == 1


async def test_window_edge(opener: Opener):
    """A retry is recognised while fewer than the window's records came after it."""
    key = new_key()
    j = opener(checkpoint_every=50)
    async with j.writer(key, holder="first") as w:
        old = await w.append([say("old")], batch_id="old")
        edge = await w.append([say("edge")], batch_id="edge")
        for i in range(IDEMPOTENCY_WINDOW - 2):
            await w.append([say(f"after {i}")], batch_id=f"after-{i}")
    await opener().checkpoint(key)
    async with opener().writer(key, holder="second") as w:
        head = w.version  # the records after both batches end in this fence
        assert head - edge.version == IDEMPOTENCY_WINDOW - 1
        assert head - old.version == IDEMPOTENCY_WINDOW
        assert (await w.append([say("edge")], batch_id="edge")).version == (
            edge.version
        )
        assert w.version == head
        # As documented: with the window's count of records after it, a batch id
        # is no longer known and the append is committed as a new record.
        fresh = await w.append([say("old")], batch_id="old")
        assert fresh.version == head + 1
    async with opener().writer(key, holder="third") as w:
        head = w.version
        assert (await w.append([say("old")], batch_id="old")).version == (fresh.version)
        assert w.version == head
    assert (await batch_ids(opener(), key)).count("old") == 2


async def test_different_events_same_batch_raise(opener: Opener):
    key = new_key()
    version = await commit_lost_ack(opener(), key, "B")
    await opener().checkpoint(key)
    with pytest.raises(ValueError, match=rf"'B'.*version {version}"):
        await retry(opener(), key, "B", text="other events")
    # In the same writer too.
    async with opener().writer(key, holder="third") as w:
        await w.append([say("c")], batch_id="C")
        with pytest.raises(ValueError, match=r"'C'.*version"):
            await w.append([say("not c")], batch_id="C")


async def test_empty_batch_id_is_refused(opener: Opener):
    key = new_key()
    async with opener().writer(key, holder="first") as w:
        head = w.version
        with pytest.raises(ValueError, match="batch_id"):
            await w.append([say("x")], batch_id="")
        assert w.version == head


async def test_checkpoint_window_size(opener: Opener):
    """A checkpoint carries one entry per record, up to the window."""
    key = new_key()
    j = opener()
    async with j.writer(key, holder="first") as w:
        for i in range(IDEMPOTENCY_WINDOW + 10):
            await w.append([say(f"m{i}")], batch_id=f"b-{i}")
        version = await w.checkpoint()
    raw = await ThreadLog(j.store, key).read_checkpoint(version)
    body = codec.decode_checkpoint(raw)
    assert len(body.batches) == ENTRY_SIZE * IDEMPOTENCY_WINDOW
    window = BatchWindow.unpack(version, body.batches)
    assert window.find(f"b-{IDEMPOTENCY_WINDOW + 9}") is not None
    assert window.find("b-0") is None


class _OldCheckpointBody(msgspec.Struct, array_like=True):
    """CheckpointBody as it was before the idempotency window was added."""

    format: int
    version: int
    record_hash: bytes
    created_at: float
    state: bytes
    chunks: list[str]
    message_count: int


def test_checkpoint_format_both_ways():
    old = _OldCheckpointBody(1, 5, b"h" * 32, 1.0, b"\x80", [], 0)
    framed = codec.encode_checkpoint(old)  # type: ignore[arg-type]
    assert codec.decode_checkpoint(framed).batches == b""
    new = codec.CheckpointBody(1, 5, b"h" * 32, 1.0, b"\x80", [], 0, b"x" * 24)
    body = codec.decode_checkpoint(codec.encode_checkpoint(new))
    assert body.batches == b"x" * 24
    # A reader of the old layout ignores the trailing field.
    plain = msgspec.msgpack.encode(new)
    assert msgspec.msgpack.decode(plain, type=_OldCheckpointBody).version == 5


def test_window_forgets_and_keeps_newest():
    window = BatchWindow(size=3)
    for version, batch in enumerate(["a", "b", "a", "c", "d"], start=1):
        window.add(version, batch, bytes([version]) * 32)
    assert window.head == 5
    assert len(window) == 3
    assert window.find("b") is None
    assert window.find("a") == (3, bytes([3]) * 4)
    assert window.find("d") == (5, bytes([5]) * 4)
    again = BatchWindow.unpack(5, window.pack(), size=3)
    assert again.find("a") == (3, bytes([3]) * 4)
    window.add(6, "e", bytes(32))
    assert window.find("a") is None
    with pytest.raises(ValueError, match="does not fit"):
        BatchWindow.unpack(1, window.pack())


async def test_verify_checks_the_window():
    j = Journal.open(f"memory://idempotency-{uuid.uuid4().hex}", checkpoint_every=0)
    key = new_key()
    await commit_lost_ack(j, key, "B", before=5)
    version = await j.checkpoint(key)
    assert (await j.verify(key)).ok
    log = ThreadLog(j.store, key)
    body = codec.decode_checkpoint(await log.read_checkpoint(version))
    assert len(body.batches) == ENTRY_SIZE * version

    async def rewrite(batches: bytes) -> None:
        await log.delete_checkpoint(version)
        changed = msgspec.structs.replace(body, batches=batches)
        await log.create_checkpoint(version, codec.encode_checkpoint(changed))

    # A checkpoint written before the window existed carries none: still clean.
    await rewrite(b"")
    assert (await j.verify(key)).ok
    flipped = bytearray(body.batches)
    flipped[-1] ^= 1
    await rewrite(bytes(flipped))
    report = await j.verify(key)
    assert [f.message for f in report.problems] == [
        "checkpoint's batch window differs from the log's batch ids"
    ]
