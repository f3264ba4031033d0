"""The local store's file status without timestamps (``stores._statx``).

On Linux 6.13 and later a ``stat`` of a segment marks its times as read and makes
the next append update them: the writer's checks use ``statx`` asked for the inode
and size only. These tests hold the helper to ``os.stat``'s answers, its fallback
to ``os.stat`` where ``statx`` is refused, and the append path to not ``stat`` its
segment at all.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

import pytest

from stores import _statx
from stores.local import LocalStore


def _usable() -> None:
    # Loudly, not a skip: where the suite runs (Linux, glibc) statx is there.
    assert sys.platform.startswith("linux"), "these tests need Linux's statx"
    path = os.path.abspath(__file__)
    assert _statx.path_status(path) == (os.stat(path).st_ino, os.stat(path).st_size)
    assert _statx._STATX.call is not None, "statx was refused on this machine"


def _through_descriptor(path: os.PathLike[str]) -> _statx.FileStatus:
    fd = os.open(path, os.O_RDONLY)
    try:
        return _statx.fd_status(fd)
    finally:
        os.close(fd)


def test_path_and_descriptor_status_are_those_of_os_stat(tmp_path):
    _usable()
    path = tmp_path / "file"
    path.write_bytes(b"x" * 12345)
    st = os.stat(path)
    assert _statx.path_status(str(path)) == (st.st_ino, 12345)
    assert _through_descriptor(path) == (st.st_ino, 12345)
    link = tmp_path / "link"
    link.symlink_to(path)
    assert _statx.path_status(str(link)).st_ino == st.st_ino  # followed
    with pytest.raises(FileNotFoundError):
        _statx.path_status(str(tmp_path / "missing"))
    with pytest.raises(NotADirectoryError):
        _statx.path_status(str(path / "below"))
    bad = os.open(path, os.O_RDONLY)
    os.close(bad)
    with pytest.raises(OSError, match="Bad file descriptor") as raised:
        _statx.fd_status(bad)
    assert raised.value.errno == errno.EBADF


def test_a_refused_statx_falls_back_to_os_stat(tmp_path, monkeypatch):
    """A sandbox whose filter refuses statx (EPERM) or a kernel without it
    (ENOSYS): the answer comes from os.stat, and statx is not tried again."""
    _usable()
    path = tmp_path / "file"
    path.write_bytes(b"abc")
    calls = []

    def refused(*args: object) -> int:
        calls.append(args)
        ctypes.set_errno(errno.EPERM)
        return -1

    monkeypatch.setattr(_statx._STATX, "call", refused)
    st = os.stat(path)
    assert _statx.path_status(str(path)) == (st.st_ino, 3)
    assert _statx._STATX.call is None
    assert _statx.path_status(str(path)) == (st.st_ino, 3)
    assert _through_descriptor(path) == (st.st_ino, 3)
    assert len(calls) == 1


async def test_an_append_does_not_stat_its_segment(tmp_path, monkeypatch):
    """Each append checks that the path still names the segment it has open, and
    how long the file is, without reading the file's times (os.stat, os.fstat):
    on a multigrain file system that would make the append's write update them,
    and its fdatasync commit that update."""
    _usable()
    store = LocalStore(tmp_path)
    await store.create("t/00000000000000000001.rec", b"first")  # opens the segment
    seen: list[object] = []
    real_stat, real_fstat = os.stat, os.fstat

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if ".seg-" in os.fsdecode(path):  # type: ignore[arg-type]
            seen.append(path)
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    def fstat(fd: int) -> os.stat_result:
        seen.append(fd)
        return real_fstat(fd)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "fstat", fstat)
    for version in range(2, 22):
        await store.create(f"t/{version:020d}.rec", b"record %d" % version)
    monkeypatch.undo()
    assert seen == []
    for version in range(2, 22):
        assert (await store.read(f"t/{version:020d}.rec"))[0] == b"record %d" % version
    await store.aclose()
