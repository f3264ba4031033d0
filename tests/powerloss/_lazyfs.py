"""A LazyFS mount for the power-loss tests: power loss on demand.

LazyFS is a FUSE file system that keeps written data in its own page cache until the
file is fsynced (or fdatasynced); ``lazyfs::clear-cache`` written to its fault fifo
drops every byte not synced yet, in place, as a power loss would. Metadata
operations (create, link, rename, unlink, mkdir) go straight to the backing
directory, so LazyFS models lost data, not lost directory entries.

The binary comes from ``$LAZYFS_BIN`` (``.ci/run`` builds it); without it the tests
fail, they do not skip.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

import pytest

BUILD_HINT = (
    "LAZYFS_BIN is not set or not executable: the power-loss tests need LazyFS. "
    "Build it with `bash ../shared/tools/build-lazyfs.sh DIR` (or run `.ci/run`, "
    "which builds it into its cache) and export LAZYFS_BIN=DIR/lazyfs"
)
TIMEOUT = 30.0
# After SIGKILL a request the dead process had already handed to LazyFS may still be
# executing; letting it finish before the cut keeps a write of the dead process from
# landing in the cache after the power loss (where a later sync would keep it).
DRAIN = 0.05
# LazyFS itself crashes now and then (a segfault in its cache's locking, about once
# in a few thousand cuts here). Its death drops every unsynced byte it held, which
# is a power cut; the mount is started again on the same backing directory, this
# many times per test at most.
MAX_REVIVALS = 3

_CONFIG = """\
[faults]
fifo_path = "{fifo}"
fifo_path_completed = "{done}"

[cache]
apply_eviction = false

[cache.simple]
custom_size = "1gb"
blocks_per_page = 1

[filesystem]
log_all_operations = false
logfile = "{log}"
"""


def lazyfs_binary() -> Path:
    """The LazyFS binary named by ``$LAZYFS_BIN``; fails the test when there is none."""
    value = os.environ.get("LAZYFS_BIN", "")
    binary = Path(value)
    if not value or not binary.is_file() or not os.access(binary, os.X_OK):
        pytest.fail(BUILD_HINT, pytrace=False)
    return binary


def _mounted(mount: Path) -> bool:
    target = os.path.realpath(mount)
    with open("/proc/mounts") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) > 2 and fields[1] == target and fields[2] == "fuse.lazyfs":
                return True
    return False


class LazyFS:
    """One LazyFS mount of ``base/backing`` on ``base/mnt``.

    Args:
        binary: The ``lazyfs`` executable (``libpcache.so`` beside it).
        base: A fresh directory that holds the backing directory, the mount point,
            the fifos, the config and LazyFS's log.
    """

    def __init__(self, binary: Path, base: Path) -> None:
        self.binary = binary
        self.base = base
        self.backing = base / "backing"
        self.mount_point = base / "mnt"
        self.fifo = base / "faults.fifo"
        self.done_fifo = base / "faults-done.fifo"
        self.log = base / "lazyfs.log"
        self.cuts = 0
        self.revivals: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._done_fd: int | None = None
        self._stderr: BinaryIO | None = None

    def mount(self) -> None:
        """Start LazyFS; wait for the mount (writes before it would be hidden)."""
        self.backing.mkdir()
        self.mount_point.mkdir()
        config = self.base / "lazyfs.toml"
        config.write_text(
            _CONFIG.format(fifo=self.fifo, done=self.done_fifo, log=self.log)
        )
        # LazyFS opens the completion fifo for writing when it starts, which blocks
        # until a reader has it open: open ours first, non-blocking.
        os.mkfifo(self.done_fifo)
        self._done_fd = os.open(self.done_fifo, os.O_RDONLY | os.O_NONBLOCK)
        self._start()

    def _start(self) -> None:
        config = self.base / "lazyfs.toml"
        env = dict(os.environ)
        libs = [str(self.binary.parent), env.get("LD_LIBRARY_PATH", "")]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in libs if p)
        self._stderr = (self.base / "lazyfs.stderr").open("ab")
        self._proc = subprocess.Popen(
            [
                str(self.binary),
                str(self.mount_point),
                # Relative, from cwd: LazyFS takes a config path containing "-o"
                # (as in /tmp/pytest-of-root/...) for a missing argument.
                "--config-path",
                config.name,
                "-o",
                "allow_other",
                "-o",
                "modules=subdir",
                "-o",
                f"subdir={self.backing}",
                "-f",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env,
            cwd=self.base,
        )
        deadline = time.monotonic() + TIMEOUT
        while not _mounted(self.mount_point):
            if self._proc.poll() is not None:
                raise AssertionError(
                    f"LazyFS exited with {self._proc.returncode} before mounting: "
                    f"{self._tail()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"LazyFS did not mount in {TIMEOUT}s: {self._tail()}"
                )
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        """LazyFS's process id."""
        assert self._proc is not None
        return self._proc.pid

    def crashed(self) -> bool:
        """Whether LazyFS exited by itself (it is only ever stopped by unmount)."""
        return self._proc is not None and self._proc.poll() is not None

    def _revive(self) -> None:
        """Start LazyFS again after it crashed, on the same backing directory.

        What it had not synced died with it, as in a power cut; the kernel still
        lists the dead mount, which is detached first.
        """
        assert self._proc is not None
        self.revivals.append(f"exited {self._proc.returncode}: {self._tail()[-400:]}")
        if len(self.revivals) > MAX_REVIVALS:
            raise AssertionError(
                f"LazyFS crashed {len(self.revivals)} times in one test: "
                f"{self.revivals}"
            )
        self._detach()
        deadline = time.monotonic() + TIMEOUT
        while _mounted(self.mount_point):
            if time.monotonic() > deadline:
                raise AssertionError("the crashed LazyFS mount was not detached")
            time.sleep(0.02)
        if self._stderr is not None:
            self._stderr.close()
        self._start()

    def _detach(self) -> None:
        # LazyFS is dead but the kernel still lists its mount: detach it lazily.
        subprocess.run(
            ["fusermount3", "-uz", str(self.mount_point)],
            check=False,
            capture_output=True,
        )

    def _state(self) -> str:
        assert self._proc is not None
        code = self._proc.poll()
        mounted = "mounted" if _mounted(self.mount_point) else "not mounted"
        return f"running, {mounted}" if code is None else f"exited {code}, {mounted}"

    def _tail(self) -> str:
        text = ""
        for path in (self.base / "lazyfs.stderr", self.log):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")[-1500:]
        return text

    def clear_cache(self) -> None:
        """Drop every unsynced byte (the power loss) and wait until LazyFS did it."""
        assert self._proc is not None
        assert self._done_fd is not None
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                # ENXIO: LazyFS has not opened its end yet.
                if exc.errno not in (errno.ENXIO, errno.ENOENT):
                    raise
                if time.monotonic() > deadline or self.crashed():
                    raise AssertionError(
                        f"LazyFS fault fifo unusable (LazyFS {self._state()}): "
                        f"{self._tail()}"
                    ) from exc
                time.sleep(0.02)
        try:
            # LazyFS reads one command per read(), ending in a newline.
            os.write(fd, b"lazyfs::clear-cache\n")
        finally:
            os.close(fd)
        received = b""
        while b"finished::clear-cache\n" not in received:
            left = deadline - time.monotonic()
            if left <= 0 or self.crashed():
                raise AssertionError(
                    f"LazyFS did not confirm the cut ({self._state()}): {self._tail()}"
                )
            ready, _, _ = select.select([self._done_fd], [], [], left)
            if ready:
                with contextlib.suppress(BlockingIOError):
                    received += os.read(self._done_fd, 4096)
        self.cuts += 1

    def power_cut(self, *procs: subprocess.Popen[str]) -> bool:
        """Kill the writers (SIGKILL: nothing more is written), then cut the power.

        Returns:
            True when LazyFS had crashed before the cut (or during it): its death
            was the power cut, and it was started again (see :data:`MAX_REVIVALS`).
            The writers may then have ended by themselves, on the errors of a dead
            mount.
        """
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=TIMEOUT)
        time.sleep(DRAIN)
        if not self.crashed():
            try:
                self.clear_cache()
            except AssertionError:
                if not self.crashed():
                    raise
        if self.crashed():
            self._revive()
            self.cuts += 1
            return True
        return False

    def unmount(self) -> None:
        """Unmount (``fusermount3 -u``), then make sure LazyFS is gone."""
        proc = self._proc
        if proc is not None:
            if proc.poll() is None and _mounted(self.mount_point):
                subprocess.run(
                    ["fusermount3", "-u", str(self.mount_point)],
                    check=False,
                    capture_output=True,
                )
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if _mounted(self.mount_point):
                self._detach()
        if self._done_fd is not None:
            os.close(self._done_fd)
            self._done_fd = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
