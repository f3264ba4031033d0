"""Local file-system object store: a plain path or ``file://`` URL.

``create`` is the atomic exclusive publish measured in STORAGE-FACTS: write a
temporary file in the target directory, fsync it, ``link`` it to the final name (the
kernel refuses if the name exists: that is the exclusive create), unlink the
temporary, fsync the directory. No reader ever sees a partial object under its name;
a crash leaves at most a hidden ``.tmp-*`` file, which :meth:`LocalStore.leftovers`
reports. All syscalls of one operation run in a single worker-thread hop.

``replace`` is a compare-and-swap under an exclusive ``fcntl.flock`` on a hidden lock
file beside the object, with write-temp-then-``rename``. Etags are content digests.

``fsync=False`` skips every fsync: commits survive a process crash but not a power
loss or kernel crash. It is an explicit, documented trade.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageError,
)
from journal.store import ObjectStore
from stores._files import ensure_dirs, fsync_dir, write_temp

if TYPE_CHECKING:
    import builtins
    from collections.abc import Iterator, Sequence

__all__ = ["LocalStore"]

_TMP_PREFIX = ".tmp-"
_TRANSIENT = {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ETIMEDOUT}


def _etag(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@contextlib.contextmanager
def _map_errors(key: str) -> Iterator[None]:
    try:
        yield
    except (ObjectExistsError, ObjectNotFoundError, PreconditionFailedError):
        raise
    except FileExistsError:
        raise ObjectExistsError(key) from None
    except (FileNotFoundError, NotADirectoryError):
        raise ObjectNotFoundError(key) from None
    except OSError as exc:
        raise StorageError(
            f"local storage failed on {key!r}: {exc}",
            transient=exc.errno in _TRANSIENT,
        ) from exc


class LocalStore(ObjectStore):
    """Objects as files under ``root``.

    A key must stay inside ``root``: a key that is empty or absolute, or has an
    empty segment, a segment starting with ``.`` (reserved for the store's own
    temporary and lock files), a backslash or a NUL raises ``ValueError``.

    Args:
        root: The directory holding the objects (created if missing).
        fsync: Whether to fsync files and directories before acknowledging.
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.fsync = fsync
        self.url = f"file://{self.root}"
        self._dirs: set[str] = set()

    # --- helpers (run in a worker thread) -------------------------------------

    def _path(self, key: str) -> str:
        if not key or key.startswith("/") or "\\" in key or "\x00" in key:
            raise ValueError(f"invalid object key {key!r}")
        parts = key.split("/")
        # A leading "." is reserved for the store's own temporary and lock files:
        # such a key would be hidden from ``list`` or collide with one of them.
        if any(not p or p.startswith(".") for p in parts):
            raise ValueError(f"invalid object key {key!r}")
        return os.path.join(self.root, *parts)

    def _sync_dir(self, path: str) -> None:
        if self.fsync:
            fsync_dir(path)

    def _ensure_dir(self, directory: str) -> None:
        if directory not in self._dirs:
            ensure_dirs(directory, fsync=self.fsync)
            self._dirs.add(directory)

    def _write_temp(self, directory: str, data: bytes) -> str:
        return write_temp(directory, data, fsync=self.fsync, prefix=_TMP_PREFIX)

    def _publish(self, key: str, data: bytes) -> str:
        path = self._path(key)
        directory = os.path.dirname(path)
        with _map_errors(key):
            self._ensure_dir(directory)
            tmp = self._write_temp(directory, data)
            try:
                os.link(tmp, path)
            finally:
                os.unlink(tmp)
            self._sync_dir(directory)
        return _etag(data)

    def _swap(self, key: str, data: bytes, if_match: str | None) -> str:
        path = self._path(key)
        directory, name = os.path.split(path)
        with _map_errors(key):
            self._ensure_dir(directory)
            lock_fd = os.open(
                os.path.join(directory, f".{name}.lock"), os.O_RDWR | os.O_CREAT, 0o644
            )
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                if if_match is not None:
                    with open(path, "rb") as fh:
                        current = _etag(fh.read())
                    if current != if_match:
                        raise PreconditionFailedError(key)
                tmp = self._write_temp(directory, data)
                try:
                    os.rename(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
                self._sync_dir(directory)
            finally:
                os.close(lock_fd)  # closing the descriptor releases the flock
        return _etag(data)

    def _read(self, key: str) -> tuple[bytes, str]:
        with _map_errors(key), open(self._path(key), "rb") as fh:
            data = fh.read()
        return data, _etag(data)

    def _read_many(self, keys: Sequence[str]) -> builtins.list[bytes | None]:
        out: list[bytes | None] = []
        for key in keys:
            try:
                with _map_errors(key), open(self._path(key), "rb") as fh:
                    out.append(fh.read())
            except ObjectNotFoundError:
                out.append(None)
        return out

    def _dir_of(self, prefix: str) -> tuple[str, str]:
        prefix = prefix.strip("/")
        if not prefix:
            return str(self.root), ""
        return self._path(prefix), prefix + "/"

    def _list(
        self, prefix: str, start_after: str | None, hidden: bool
    ) -> builtins.list[str]:
        directory, base = self._dir_of(prefix)
        out: list[str] = []
        with _map_errors(prefix):
            try:
                walker = os.walk(directory)
                for dirpath, dirnames, filenames in walker:
                    dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                    rel = os.path.relpath(dirpath, directory)
                    sub = base if rel == "." else base + rel.replace(os.sep, "/") + "/"
                    for name in filenames:
                        if name.startswith(".") != hidden:
                            continue
                        if hidden and not name.startswith(_TMP_PREFIX):
                            continue
                        key = sub + name
                        if start_after is None or key > start_after:
                            out.append(key)
            except FileNotFoundError:
                return []
        out.sort()
        return out

    @staticmethod
    def _holds_objects(directory: str) -> bool:
        # Directories outlive their last object (delete leaves them in place, so a
        # racing create never loses its directory). As on an object store, only a
        # directory that still holds an object is a child.
        for _, dirnames, filenames in os.walk(directory):
            if any(not name.startswith(".") for name in filenames):
                return True
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        return False

    def _children(self, prefix: str) -> builtins.list[str]:
        directory, _ = self._dir_of(prefix)
        try:
            with os.scandir(directory) as entries:
                return sorted(
                    e.name
                    for e in entries
                    if e.is_dir(follow_symlinks=False)
                    and not e.name.startswith(".")
                    and self._holds_objects(e.path)
                )
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(
                f"local storage failed listing {prefix!r}: {exc}"
            ) from exc

    def _delete(self, key: str) -> bool:
        path = self._path(key)
        with _map_errors(key):
            try:
                os.unlink(path)
            except FileNotFoundError:
                return False
            self._sync_dir(os.path.dirname(path))
        return True

    # --- the protocol ----------------------------------------------------------

    async def create(self, key: str, data: bytes) -> str:
        return await asyncio.to_thread(self._publish, key, data)

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        return await asyncio.to_thread(self._swap, key, data, if_match)

    async def read(self, key: str) -> tuple[bytes, str]:
        return await asyncio.to_thread(self._read, key)

    async def read_many(
        self, keys: Sequence[str], *, concurrency: int = 16
    ) -> builtins.list[bytes | None]:
        return await asyncio.to_thread(self._read_many, keys)

    async def list(
        self, prefix: str, *, start_after: str | None = None
    ) -> builtins.list[str]:
        return await asyncio.to_thread(self._list, prefix, start_after, False)

    async def leftovers(self, prefix: str) -> builtins.list[str]:
        return await asyncio.to_thread(self._list, prefix, None, True)

    async def delete(self, key: str) -> bool:
        return await asyncio.to_thread(self._delete, key)

    async def children(self, prefix: str) -> builtins.list[str]:
        return await asyncio.to_thread(self._children, prefix)
