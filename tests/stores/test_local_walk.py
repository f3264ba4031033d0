"""The local store's listing walk gives what ``os.walk`` gave it.

``_walk_files`` replaced ``os.walk`` (and a ``relpath`` per directory) in
``LocalStore._list``: the same directories entered, the same files, and each
directory's key prefix as the relative path it used to compute.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from stores.local import LocalStore, _walk_files

if TYPE_CHECKING:
    from pathlib import Path


def _by_os_walk(directory: str, base: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = os.path.relpath(dirpath, directory)
        sub = base if rel == "." else base + rel.replace(os.sep, "/") + "/"
        out[sub] = sorted(filenames)
    return out


def _by_walk_files(directory: str, base: str) -> dict[str, list[str]]:
    return {sub: sorted(files) for _, sub, files in _walk_files(directory, base)}


def _tree(root: Path) -> None:
    for rel in (
        "a/b/c/f1",
        "a/b/f2",
        "a/.hidden/f3",
        "a/.f4",
        "d/f5",
        "d/e/f/g/f6",
        "top",
        ".seg-0",
    ):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    (root / "empty").mkdir()
    (root / "a" / "link-to-d").symlink_to(root / "d")
    (root / "a" / "link-to-top").symlink_to(root / "top")
    (root / "dangling").symlink_to(root / "nowhere")


@pytest.mark.parametrize("base", ["", "ns/"])
def test_the_walk_is_os_walk(tmp_path: Path, base: str) -> None:
    _tree(tmp_path)
    assert _by_walk_files(str(tmp_path), base) == _by_os_walk(str(tmp_path), base)


def test_a_missing_or_unreadable_directory_lists_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    for path in (tmp_path / "none", tmp_path / "file"):
        assert list(_walk_files(str(path), "")) == []
        assert _by_os_walk(str(path), "") == {}


class _Failing:
    """A scandir iterator that fails after its first entry."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.given = 0

    def __enter__(self) -> _Failing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()

    def __iter__(self) -> _Failing:
        return self

    def __next__(self) -> os.DirEntry[str]:
        if self.given:
            raise OSError("the directory went bad")
        self.given += 1
        return next(self.inner)


def test_a_directory_failing_midway_is_skipped_as_os_walk_skips_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path)
    scandir = os.scandir

    def failing(path: Any) -> Any:
        found = scandir(path)
        return _Failing(found) if str(path).endswith(("/a", "/d/e")) else found

    monkeypatch.setattr(os, "scandir", failing)
    walked = _by_walk_files(str(tmp_path), "")
    assert walked == _by_os_walk(str(tmp_path), "")
    assert "a/" not in walked
    assert "d/e/" not in walked
    assert "d/" in walked


async def test_listing_a_store_is_unchanged(tmp_path: Path) -> None:
    store = LocalStore(tmp_path, fsync=False)
    keys = [
        "t/log/00000000000000000001.rec",
        "t/log/00000000000000000002.rec",
        "t/LEASE",
        "t/checkpoints/00000000000000000002.ckpt",
        "u/v/w/x",
    ]
    for key in keys:
        await store.create(key, b"data")
    assert await store.list("") == sorted(keys)
    assert await store.list("t") == sorted(k for k in keys if k.startswith("t/"))
    assert await store.list("t/log", start_after="t/log/00000000000000000001.rec") == [
        "t/log/00000000000000000002.rec"
    ]
    assert await store.list("t/log", start_after="s") == [
        "t/log/00000000000000000001.rec",
        "t/log/00000000000000000002.rec",
    ]
    assert await store.list("t/log", start_after="u") == []
    assert await store.list("nothing/here") == []
