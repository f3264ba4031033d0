"""Regressions for defects a torture run found: bad roots, misleading findings, ids."""

from __future__ import annotations

import pytest

from journal import InvalidKeyError, Journal, MessageAppended, Msg, ThreadKey
from journal.layout import ThreadLayout
from tests.journal.test_corruption import (
    Where,
    build,
    fresh,
    new_key,
    rewrite,
    where,  # noqa: F401  (the fixture)
)


async def test_damage_to_one_record_is_not_reported_at_the_next(where: Where):
    """Record 3 damaged: verify names version 3, not a broken chain at 4."""
    key = new_key()
    j = await build(where, key)
    record_key = ThreadLayout.of(key).record_key(3)

    def flip(data: bytearray) -> bytes:
        data[len(data) // 2] ^= 0x20
        return bytes(data)

    await rewrite(where, j, record_key, flip)
    report = await fresh(where).verify(key)
    assert not report.ok
    assert [p.version for p in report.problems] == [3], [
        str(p) for p in report.problems
    ]


def test_a_root_that_is_a_regular_file_is_refused(tmp_path):
    path = tmp_path / "journal"
    path.write_text("not a directory")
    with pytest.raises(ValueError, match="not a directory") as info:
        Journal.open(str(path))
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match="not a directory"):
        Journal.open(f"file://{path}")


def test_a_root_under_a_regular_file_is_refused(tmp_path):
    path = tmp_path / "file"
    path.write_text("not a directory")
    with pytest.raises(ValueError, match="not a directory") as info:
        Journal.open(str(path / "journal"))
    assert str(path) in str(info.value)


@pytest.mark.parametrize("url", ["", "file://"])
def test_an_empty_root_is_refused(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="root"):
        Journal.open(url)


def test_a_lone_surrogate_in_an_id_is_named_as_such():
    with pytest.raises(InvalidKeyError, match="surrogate") as info:
        ThreadKey("agent\ud800", "s")
    assert "control character" not in str(info.value)


@pytest.mark.parametrize("segments", [True, False], ids=["segments", "files"])
async def test_the_next_writer_removes_old_leftovers(tmp_path, segments):
    """Temporary files of interrupted writes no longer pile up crash after crash."""
    import os
    import time

    root = tmp_path / "j"
    j = Journal.open(str(root), segments=segments)
    key = new_key()
    async with j.writer(key) as w:
        await w.append([MessageAppended(Msg("user", "one"))])
    log_dir = root / key.prefix / "log"
    old = [log_dir / f".tmp-old{i}" for i in range(3)]
    young = log_dir / ".tmp-young"
    for path in [*old, young]:
        path.write_bytes(b"an interrupted write")
    hour_ago = time.time() - 2 * 3600
    for path in old:
        os.utime(path, (hour_ago, hour_ago))
    assert len((await j.verify(key)).warnings) == 4
    async with Journal.open(str(root), segments=segments).writer(key) as w:
        await w.append([MessageAppended(Msg("user", "two"))])
    assert not any(p.exists() for p in old)
    assert young.exists()  # perhaps a reader's checkpoint, being written
    report = await j.verify(key)
    assert report.ok
    assert len(report.warnings) == 1


class _CheckpointsCancelled:
    """A memory store on which a checkpoint's chunk writes end cancelled."""

    @staticmethod
    def make(name: str):
        import asyncio

        from stores.memory import MemoryStore

        class Store(MemoryStore):
            async def create_many(self, items, *, concurrency=16):
                if any("/blobs/" in key for key, _ in items):
                    raise asyncio.CancelledError
                return await super().create_many(items, concurrency=concurrency)

        return Store(name)


@pytest.mark.parametrize("via", ["close", "checkpoint"])
async def test_a_cancelled_background_checkpoint_does_not_break_the_writer(via):
    """Found by the simulation at full size: close() re-raised the background
    checkpoint's CancelledError, so the lease was never released."""
    import uuid

    store = _CheckpointsCancelled.make(f"cancelled-{uuid.uuid4().hex}")
    j = Journal(store, checkpoint_every=2)
    key = new_key()
    w = await j.acquire(key, holder="a")
    for i in range(6):
        await w.append([MessageAppended(Msg("user", f"m{i}"))])
    if via == "checkpoint":
        # The explicit checkpoint waits for the background one, then writes its
        # own (whose chunks are cancelled too: that one is the caller's to see).
        with pytest.raises(BaseException):  # noqa: PT011, B017
            await w.checkpoint()
    await w.close()
    # The lease was released: another holder takes the thread at once.
    async with j.writer(key, holder="b") as other:
        assert other.version == 8
