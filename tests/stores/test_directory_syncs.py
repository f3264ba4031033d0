"""A new object's directories are durable before its write is acknowledged.

A directory entry is durable once its parent is synced. The store syncs the parent
of each directory it creates, and of each it finds made by someone else (another
thread or process may have made it a moment ago, its parent not synced yet), once
per process: an append under such a directory must not be acknowledged while a
power cut could still take the directory, and the append with it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from stores import _files
from stores.local import LocalStore

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

REC = f"{1:020d}.rec"


def _record_dir_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    synced: list[str] = []
    real = _files.fsync_dir

    def fsync_dir(path: str | os.PathLike[str]) -> None:
        synced.append(os.path.normpath(os.fspath(path)))
        real(path)

    monkeypatch.setattr(_files, "fsync_dir", fsync_dir)
    return synced


async def test_a_directory_made_by_another_writer_has_its_entry_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Fails when only the parents of directories this call made are synced: the
    root's entry for ``x`` (made by another process, not yet synced) was not."""
    root = tmp_path / "root"
    os.makedirs(root / "x")  # another writer's, its parent not synced yet
    synced = _record_dir_syncs(monkeypatch)
    store = LocalStore(root)
    await store.create(f"x/s2/log/{REC}", b"one")
    assert str(root) in synced  # x's entry
    assert str(root / "x") in synced  # s2's, made here
    assert str(root / "x" / "s2") in synced  # log's
    # Once per process: the next thread under x syncs only what it makes.
    synced.clear()
    await store.create(f"x/s3/log/{REC}", b"two")
    assert str(root) not in synced
    assert synced[:2] == [str(root / "x"), str(root / "x" / "s3")]
    await store.aclose()


async def test_nothing_above_the_store_root_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    root = tmp_path / "root"
    os.makedirs(root)
    synced = _record_dir_syncs(monkeypatch)
    store = LocalStore(root)
    await store.create(f"x/log/{REC}", b"one")
    assert all(path.startswith(str(root)) for path in synced), synced
    await store.aclose()
