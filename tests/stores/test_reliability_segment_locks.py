"""A paused or hung process holding a segment's lock cannot block the store forever.

A writer SIGSTOPped inside an append keeps the segment's exclusive ``flock``. Every
lock wait of the local store is bounded by ``LocalStore(lock_timeout=...)`` and ends
in a transient ``StorageError`` naming the segment file and the pid holding the lock;
once the holder is continued (and finishes its append) or killed, the next attempt
goes through, and the resumed writer's frame is whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.errors import ObjectExistsError, StorageError
from stores.local import LocalStore
from tests.stores._segment_child import (
    body_for,
    parse_segment,
    record_name,
    segment_name,
)

REPO = Path(__file__).resolve().parents[2]
CHILD = "tests.stores._segment_child"
LOG = "ns/agent/~/s/main/log/"
TIMEOUT = 0.3


def rec(version: int) -> str:
    return f"{LOG}{record_name(version)}"


def _child(*args: str, stdout: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", CHILD, *args], cwd=REPO, text=True, stdout=stdout
    )


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        os.kill(proc.pid, signal.SIGCONT)
    proc.wait()


def _assert_names_holder(exc: StorageError, path: Path, pid: int) -> None:
    assert exc.transient
    assert str(path) in str(exc)
    assert f"pid {pid}" in str(exc)


async def test_a_writer_stopped_mid_append_times_out_the_next_one(tmp_path):
    root = tmp_path / "root"
    store = LocalStore(root)
    for v in (1, 2):
        await store.create(rec(v), f"record {v}".encode())
    path = root / LOG / segment_name(3)
    body = body_for(rec(3), 64 * 1024)
    proc = _child(str(root), "pause", rec(3), str(64 * 1024))
    try:
        # Returns once the child has stopped itself, half its frame written.
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        other = LocalStore(root, lock_timeout=TIMEOUT)
        with pytest.raises(StorageError) as info:
            await other.create(rec(3), b"the takeover's record")
        _assert_names_holder(info.value, path, proc.pid)
        with pytest.raises(StorageError) as info:
            await other.read(rec(1))  # a reader waits for the half-written frame
        _assert_names_holder(info.value, path, proc.pid)

        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait() == 0
    finally:
        _kill(proc)
    # The resumed writer finished its frame: whole, and the create stays exclusive.
    with pytest.raises(ObjectExistsError):
        await other.create(rec(3), b"the takeover's record")
    assert (await other.read(rec(3)))[0] == body
    await other.create(rec(4), b"record 4")
    frames, tail = parse_segment(path)
    assert tail == 0
    assert all(f.data_ok for f in frames)
    assert [f.name for f in frames] == [record_name(v) for v in (1, 2, 3, 4)]


async def test_a_hung_lock_holder_fails_acquire_clearly_until_it_is_killed(tmp_path):
    key = ThreadKey("lock-agent", "s", user_id="u")
    root = tmp_path / "root"
    async with Journal(LocalStore(root), checkpoint_every=0).writer(
        key, holder="first"
    ) as w:
        await w.append([MessageAppended(Msg("user", "hello"))])
    path = root / key.prefix / "log" / segment_name(1)
    proc = _child(str(root), "hold", str(path), stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        journal = Journal(LocalStore(root, lock_timeout=TIMEOUT), checkpoint_every=0)
        with pytest.raises(StorageError) as info:
            async with journal.writer(key, holder="second"):
                pass
        _assert_names_holder(info.value, path, proc.pid)
    finally:
        _kill(proc)
    async with journal.writer(key, holder="second") as w:
        await w.append([MessageAppended(Msg("user", "after the kill"))])
        head = w.version
    versions = [r.version async for r in journal.records(key, 1)]
    assert versions == list(range(1, head + 1))
    assert head >= 4  # two fences and two messages at least


def test_lock_timeout_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="lock_timeout"):
        LocalStore(tmp_path, lock_timeout=0)


def test_a_forked_child_is_not_blocked_by_a_lock_a_parent_thread_held(
    tmp_path: Path,
) -> None:
    """Fails when the after-fork hook resets descriptors but not the locks: a
    parent thread inside an append at the fork held its segment's thread lock, and
    the child's read of a committed record waited on it forever."""
    import threading

    from stores.segments import SegmentSet

    directory = str(tmp_path)
    segs = SegmentSet(fsync=True, lock_timeout=10.0)
    segs.create(directory, record_name(1), b"one", key="one")
    pending = []
    writer = threading.Thread(
        target=lambda: pending.append(
            segs.create_unsynced(directory, record_name(2), b"two", key="two")
        )
    )
    writer.start()
    writer.join()  # its frame written, its sync (and the locks' release) pending
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        signal.alarm(5)
        try:
            ok = segs.read(directory, record_name(1)) == b"one"
        except BaseException:
            os._exit(3)
        os._exit(0 if ok else 2)
    pending[0].finish()  # the parent's flock goes: the child's read may proceed
    _, status = os.waitpid(pid, 0)
    assert not os.WIFSIGNALED(status), "the child hung on a lock held at the fork"
    assert os.WEXITSTATUS(status) == 0
    assert SegmentSet(fsync=True).read(directory, record_name(2)) == b"two"
