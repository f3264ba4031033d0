"""What is written without a sync: checkpoints (derived data) and a holder's own lease.

A background checkpoint's syncs used to queue the commits made meanwhile behind
them (the slow turn of issue 16). Now the checkpoint and its chunks are written
without a sync; a power cut may tear them, which loads and verify take as what it
is. Three things still flush them: an explicit ``checkpoint()``, a record that
references their chunks (``AgentStateReplaced``), and retention, before it
removes the records they cover.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey, ThreadWriter
from journal.engine.log import ThreadLog
from projections import AgentStateProjection, fold
from stores.local import LocalStore
from tests.journal._syncs import syncs

if TYPE_CHECKING:
    from pathlib import Path

KEY = ThreadKey("derived", "sync", user_id="u")


def _derived(path: str) -> bool:
    return "/checkpoints" in path or "/blobs" in path


async def _until_checkpointed(w: ThreadWriter) -> None:
    """Append until a background checkpoint is written (at a chunk boundary)."""
    for i in range(60):
        await w.append([say(i)])
        task = w._checkpointer
        if task is not None:
            await task
            return
    raise AssertionError("no background checkpoint in 60 records")


def say(i: int) -> MessageAppended:
    return MessageAppended(Msg("user", f"message {i} " + "x" * 200))


@pytest.mark.parametrize("segments", [True, False])
async def test_a_background_checkpoint_syncs_nothing(tmp_path: Path, segments: bool):
    j = Journal.open(tmp_path / "root", checkpoint_every=10, segments=segments)
    w = await j.acquire(KEY)
    with syncs() as calls:
        for i in range(40):  # a checkpoint is due from 10 on, at a chunk boundary
            await w.append([say(i)])
            task = w._checkpointer
            if task is not None:
                await task
                break
        assert task is not None
        version = w.version
    await w.close()
    assert await ThreadLog(j.store, KEY).checkpoint_versions() == [version]
    derived = [c for c in calls if _derived(c[1]) and c[0] != "rename"]
    if not segments:
        # Chunk files are synced before they are linked (a torn file under a
        # content-addressed name would stay), their directory is not.
        derived = [c for c in derived if "/blobs/.tmp-" not in c[1]]
    assert derived == []
    # Each commit was synced.
    assert len([c for c in calls if "/log" in c[1]]) >= i + 1
    state, warnings = await Journal.open(tmp_path / "root").load_with_warnings(KEY)
    assert warnings == []
    assert len(state.context) == i + 1


async def _checkpoint_synced(j: Journal) -> tuple[int, set[str]]:
    """Five records, then an explicit checkpoint: its version and what it synced."""
    async with j.writer(KEY) as w:
        for i in range(5):
            await w.append([say(i)])
        with syncs() as calls:
            version = await w.checkpoint()
    return version, {
        path.rsplit("/", 1)[-1] for call, path in calls if call != "rename"
    }


async def test_an_explicit_checkpoint_is_durable(tmp_path: Path):
    j = Journal.open(tmp_path / "root", checkpoint_every=0)
    version, synced = await _checkpoint_synced(j)
    assert ".seg-blobs" in synced  # its chunks
    assert f"{version:020d}.ckpt" in synced  # the checkpoint file
    # Naming log spans, it has no chunk to sync: the records are durable.
    spans = Journal.open(tmp_path / "spans", checkpoint_every=0, log_spans="always")
    version, synced = await _checkpoint_synced(spans)
    assert ".seg-blobs" not in synced, synced
    assert f"{version:020d}.ckpt" in synced
    async with j.writer(KEY) as w:
        await w.append([say(5)])
    with syncs() as calls:
        version = await Journal.open(tmp_path / "root").checkpoint(KEY)
    assert any(path.endswith(f"{version:020d}.ckpt") for _, path in calls)


async def test_a_record_referencing_checkpoint_chunks_flushes_them(tmp_path: Path):
    j = Journal.open(tmp_path / "root", checkpoint_every=10)
    w = await j.acquire(KEY)
    await _until_checkpointed(w)  # chunks written, not synced
    with syncs() as calls:
        # No specific event says this: an AgentStateReplaced, whose messages are
        # the chunks the checkpoint just wrote.
        record = await w.update("flag", _interrupt)
    assert record is not None
    assert [type(e).__name__ for e in record.events] == ["AgentStateReplaced"]
    blob_syncs = [c for c in calls if c[1].endswith("/blobs/.seg-blobs")]
    assert blob_syncs, calls
    log_sync = next(i for i, c in enumerate(calls) if "/log/" in c[1])
    assert calls.index(blob_syncs[0]) < log_sync  # durable before the record
    await w.close()
    state = await Journal.open(tmp_path / "root").load(KEY)
    assert state.shutdown_interrupted
    assert state.context == w.state.context


def _interrupt(state: object) -> None:
    state.shutdown_interrupted = True  # type: ignore[attr-defined]


async def test_retention_flushes_the_checkpoint_it_keeps_first(tmp_path: Path):
    now = [1_000_000.0]
    j = Journal(
        LocalStore(tmp_path / "root"), checkpoint_every=10, clock=lambda: now[0]
    )
    w = await j.acquire(KEY)
    await _until_checkpointed(w)
    for i in range(5):
        await w.append([say(i)])
    await w.close()
    now[0] += 30 * 24 * 3600
    with syncs() as calls:
        marker = await j.retain(KEY)
    assert marker is not None
    ckpt = f"{marker.checkpoint:020d}.ckpt"
    flushed = next(i for i, c in enumerate(calls) if c[1].endswith(ckpt))
    blobs = next(i for i, c in enumerate(calls) if c[1].endswith(".seg-blobs"))
    marker_written = next(
        i for i, c in enumerate(calls) if c == ("rename", c[1]) and "RETENTION" in c[1]
    )
    assert max(flushed, blobs) < marker_written
    report = await j.verify(KEY)
    assert report.ok, report.problems


@pytest.mark.parametrize("damage", ["empty", "half", "zero-sector"])
async def test_a_torn_checkpoint_is_a_warning_not_a_problem(tmp_path: Path, damage):
    j = Journal.open(tmp_path / "root", checkpoint_every=0)
    async with j.writer(KEY) as w:
        for i in range(80):  # the batch window makes the checkpoint > 1 KiB
            await w.append([say(i)])
        version = await w.checkpoint()
    path = tmp_path.joinpath(
        "root", *KEY.segments, "checkpoints", f"{version:020d}.ckpt"
    )
    raw = path.read_bytes()
    assert len(raw) > 1024
    torn = {
        "empty": b"",
        "half": raw[: len(raw) // 2],
        "zero-sector": raw[:512] + bytes(512) + raw[1024:],
    }[damage]
    path.write_bytes(torn)
    reader = Journal.open(tmp_path / "root")
    report = await reader.verify(KEY)
    assert report.ok, report.problems
    assert any("derived, written unsynced" in w.message for w in report.warnings)
    state, warnings = await reader.load_with_warnings(KEY)
    assert any(f"checkpoint {version}" in w for w in warnings)
    records = [r async for r in reader.records(KEY)]
    projection = AgentStateProjection(str(KEY))
    expected = fold(projection, projection.initial(KEY), records)
    assert msgspec.msgpack.encode(state) == msgspec.msgpack.encode(expected)


async def test_a_holder_moves_its_own_lease_without_a_sync(tmp_path: Path):
    """Acquiring syncs LEASE; renewing, marking idle and releasing it do not.

    Losing such a write to a power cut leaves the lease at the same epoch (or
    unreadable, read as expired): the writer it described died with the power.
    """
    j = Journal.open(tmp_path / "root")
    with syncs() as calls:
        w = await j.acquire(KEY)
    assert any(path.endswith("/main") for call, path in calls if call == "fsync")
    lease_temp = [c for c in calls if c[0] == "fsync" and "/main/.tmp-" in c[1]]
    assert lease_temp  # the new epoch's LEASE, synced before it is renamed
    with syncs() as calls:
        await w.renew()
        assert await w.set_idle(True)
        assert await w.set_idle(False)
        await w.append([say(0)])
        await w.close()
    # Renew, idle, busy and release overwrite LEASE in place, at the holder's
    # lease size (tests/journal/test_lease_in_place.py): nothing renamed over it.
    assert [c for c in calls if c[0] == "rename"] == []
    assert [c for c in calls if c[0] == "fsync"] == []
    assert [c[1].rsplit("/", 1)[-1] for c in calls if c[0] == "fdatasync"] == [
        ".seg-00000000000000000000"  # the one commit
    ]
    # Another holder takes the released lease at once, at the next epoch.
    w2 = await j.acquire(KEY, holder="other", wait=0)
    assert w2.epoch == w.epoch + 1
    await w2.close()
