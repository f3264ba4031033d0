"""Local file-system object store: a plain path or ``file://`` URL.

``create`` is the atomic exclusive publish measured in STORAGE-FACTS: write a
temporary file in the target directory, fsync it, ``link`` it to the final name (the
kernel refuses if the name exists: that is the exclusive create), unlink the
temporary, fsync the directory. No reader ever sees a partial object under its name;
a crash leaves at most a hidden ``.tmp-*`` file, which :meth:`LocalStore.leftovers`
reports. All syscalls of one operation run in a single worker-thread hop
(``stores._offload.run_blocking``, a lighter one than ``asyncio.to_thread``).

``replace`` is a compare-and-swap under an exclusive ``fcntl.flock`` on a hidden lock
file beside the object, with write-temp-then-``rename``. Etags are content digests.

``fsync=False`` skips every fsync: commits survive a process crash but not a power
loss or kernel crash. It is an explicit, documented trade.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import time
from contextlib import nullcontext
from stat import S_ISREG
from typing import TYPE_CHECKING, Any, TypeVar, cast

from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageError,
)
from journal.layout import HINT_NAME, LEASE_NAME, ThreadLayout, parse_hint
from journal.loopless import loop_running, pause
from journal.store import ObjectStore, Quarantined, check_sibling_prefix
from stores._files import (
    DEFAULT_LOCK_TIMEOUT,
    ensure_dirs,
    flock_within,
    fsync_dir,
    rename_into_place,
    write_temp,
)
from stores._kernel_sync import for_running_loop as kernel_syncs_here
from stores._kernel_sync import in_flight as kernel_syncs_in_flight
from stores._nowait import WouldBlock, attempt, read_whole
from stores._offload import in_flight, run_blocking, run_io_only
from stores.segments import (
    QUARANTINE_PREFIX,
    PendingCreate,
    SegmentSet,
    first_segment_after,
    inspect_cut,
    is_segment,
    segment_of,
)

if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

__all__ = ["INLINE_WRITE_BUDGET", "LocalStore"]

INLINE_WRITE_BUDGET = 0.002
"""Seconds an average write may take and still run on the event loop (2 ms)."""

INLINE_FRAME_MAX = 256 * 1024
"""The largest derived blob written on the event loop (bytes); a chunk can reach a
mebibyte, whose checksums and copy would hold the loop for milliseconds, while a
worker computes them with the interpreter let go."""

_CONCURRENT_WINDOW = 0.005
# An append to another directory less than this after the last one ended is
# taken to be concurrent with it (seconds).

_T = TypeVar("_T")
_UNSYNCED = ".unsynced"
"""Flags a thread directory a store that does not sync (``fsync=False``) wrote in:
see :meth:`LocalStore.make_durable`."""
_TMP_PREFIX = ".tmp-"
_TRANSIENT = {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ETIMEDOUT}


def _bad_part(part: str) -> bool:
    # A leading "." is reserved for the store's own temporary and lock files: such a
    # key would be hidden from ``list`` or collide with one of them.
    return not part or part[0] == "." or "\\" in part or "\x00" in part


# Where a part of a key is empty or starts with ".", or a backslash or NUL, with
# ``{end}`` for where a key ends.
_BAD_PART = r"(?:^|/)(?:[./]|{end})|[\\\x00]"
# \Z, not $: a key may end in a newline (``$`` would also match before it).
_BAD_KEY = re.compile(_BAD_PART.format(end=r"\Z"))
# Where _BAD_PART would match in keys joined by newlines (``$`` at each line's end),
# as substrings: searching for each is a memchr-fast scan, where the multi-line
# regex took 90 µs over the names of a hundred records (a load's span read).
_BAD_KEY_PAIRS = ("\n\n", "\n.", "\n/", "/.", "//", "/\n", "\\", "\x00")


def _maybe_bad_keys(joined: str) -> bool:
    """Whether one of the keys joined by newlines in ``joined`` may be bad.

    True wherever one is (an empty part, a part starting with ".", a backslash or
    NUL), and where one holds a newline, which the check of each key then allows.
    """
    if not joined or joined[0] in "./\n" or joined[-1] in "/\n":
        return True
    return any(map(joined.__contains__, _BAD_KEY_PAIRS))


# Object names a sibling read found valid. A process reading many threads' records
# asks for the same few thousand names ("...0042.rec"): looking them up is a tenth
# of the time of searching their joined text for a bad part (which took a fifth of
# reading a hundred records).
_CHECKED_NAMES: set[str] = set()
_CHECKED_NAMES_MAX = 16384

_HINT_TAIL = f"/{HINT_NAME}"
# posix_fadvise is missing on some systems (macOS): no prefetch there.
_WILL_NEED = getattr(os, "POSIX_FADV_WILLNEED", None)


def _will_need(path: str) -> None:
    """Ask the kernel to read the file at ``path`` into the page cache (async)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # gone, or never there: the read that follows will say
    try:
        os.posix_fadvise(fd, 0, 0, _WILL_NEED)  # type: ignore[arg-type]
    except OSError:
        pass  # a hint only
    finally:
        os.close(fd)


def _etag(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _compare_and_overwrite(
    path: str, data: bytes, if_match: str, key: str, *, in_place: bool
) -> bool:
    """Check the file at ``path`` against ``if_match``; overwrite it if ``in_place``.

    Call with the object's lock held. The overwrite happens only when ``data`` is
    the file's size: the file is then never truncated (which LazyFS, the power-loss
    tests' file system, gets wrong) and its size never changes, so a reader sizing
    its read by the file reads one whole version or a mix of two, never a cut one.

    Returns:
        Whether ``data`` was written (False: the caller replaces the file).

    Raises:
        PreconditionFailedError: The file's etag is not ``if_match``.
        FileNotFoundError: There is no file.
    """
    fd = -1
    if in_place:
        # A file this process may not write (copied in read-only) can still be
        # compared, and replaced by a rename (which needs only the directory).
        with contextlib.suppress(PermissionError):
            fd = os.open(path, os.O_RDWR)
        in_place = fd >= 0
    if fd < 0:
        fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        current = os.pread(fd, size, 0)
        if _etag(current) != if_match:
            raise PreconditionFailedError(key)
        if not in_place or len(data) != len(current):
            return False
        view = memoryview(data)
        offset = 0
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
        return True
    finally:
        os.close(fd)


def _is_link(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink()
    except OSError:  # as os.walk's islink: entered, then skipped if unreadable
        return False


def _walk_files(
    directory: str, base: str
) -> Iterator[tuple[str, str, builtins.list[str]]]:
    """``(dirpath, key prefix, file names)`` of ``directory`` and its subdirectories.

    The store's one walk (listing, quarantine, leftovers, whether a directory holds
    objects). What ``os.walk`` gives, errors included (a directory that cannot be
    read, or fails midway, is skipped with what lies below it): top down, symbolic
    links to directories not followed, directories whose name starts with "." not
    entered. Each directory's key prefix is built as it descends: ``os.walk`` and
    an ``os.path.relpath`` per directory took a tenth of a small thread's load,
    which lists one flat directory after its checkpoint.
    """
    pending = [(directory, base)]
    while pending:
        dirpath, sub = pending.pop()
        files: builtins.list[str] = []
        below: builtins.list[tuple[str, str]] = []
        try:
            entries = os.scandir(dirpath)
        except OSError:
            continue
        with entries:
            try:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    if not is_dir:
                        files.append(entry.name)
                    elif not entry.name.startswith(".") and not _is_link(entry):
                        below.append((entry.path, f"{sub}{entry.name}/"))
            except OSError:
                continue
        yield dirpath, sub, files
        pending.extend(reversed(below))


class _MapErrors:
    """The store's errors for what the file system raised on ``key`` in the block.

    A class rather than a generator: an append enters two, on the event loop.
    """

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    def __enter__(self) -> None:
        pass

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _: object
    ) -> None:
        if kind is None or not issubclass(kind, OSError):
            return
        # The file system's error stays the cause: which call failed on which path
        # is what tells a vanished object from a write that lost its directory.
        key = self.key
        if issubclass(kind, FileExistsError):
            raise ObjectExistsError(key) from exc
        if issubclass(kind, (FileNotFoundError, NotADirectoryError)):
            raise ObjectNotFoundError(key) from exc
        assert isinstance(exc, OSError)  # noqa: S101 - kind says so
        raise StorageError(
            f"local storage failed on {key!r}: {exc}",
            transient=exc.errno in _TRANSIENT,
        ) from exc


def _checked_root(root: str | os.PathLike[str]) -> str:
    """``root`` made absolute, refused at once if it cannot hold a directory.

    An empty root would silently mean the working directory; a root that is a
    regular file, or lies under one, would make every later operation fail. Made
    absolute as ``pathlib.Path.absolute`` does (``.`` parts and repeated slashes
    dropped, ``..`` kept), without importing ``pathlib`` on a cold start.
    """
    text = os.path.expanduser(os.fspath(root))
    if not text:
        raise ValueError("the local store's root must not be empty")
    if not os.path.isabs(text):
        text = os.path.join(os.getcwd(), text)
    path = "/" + "/".join(p for p in text.split("/") if p not in ("", "."))
    # The nearest existing ancestor (or the root itself) must be a directory.
    candidate = path
    while True:
        if os.path.exists(candidate):
            if not os.path.isdir(candidate):
                raise ValueError(
                    f"the local store's root {path!r} cannot be used: "
                    f"{candidate!r} is not a directory"
                )
            break
        parent = os.path.dirname(candidate)
        if parent == candidate:
            break
        candidate = parent
    return path


class LocalStore(ObjectStore):
    """Objects as files under ``root``.

    A key must stay inside ``root``: a key that is empty or absolute, or has an
    empty segment, a segment starting with ``.`` (reserved for the store's own
    temporary and lock files), a backslash or a NUL raises ``ValueError``.

    Log records (``<20 digits>.rec``, and other names ending in ``.rec``) and
    content-addressed blobs (64 hex digits) live in append-only segment files
    (:mod:`stores.segments`): one ``fdatasync`` per create, or per batch of
    ``create_many``, instead of a file sync plus a directory sync each.
    ``segments=False`` publishes them as files like every other object; either
    store reads what the other wrote.

    Args:
        root: The directory holding the objects (created if missing). An empty
            root, or one that is or lies under a regular file, raises
            ``ValueError`` here.
        fsync: Whether to fsync files and directories before acknowledging.
        segments: Whether records and blobs go to segment files (the default).
        lock_timeout: Seconds to wait for a file lock (a segment's, or a
            compare-and-swap's) that another process holds, 10 by default. A
            process stopped or hung while holding one (a writer SIGSTOPped inside
            an append) then fails the operation with a transient ``StorageError``
            naming the file and the holder's pid, instead of blocking it forever.
            The lock cannot be taken over: see :mod:`stores.segments` for why.
        inline_reads: Whether a read is first tried on the event loop, served
            there only if its bytes are all in the page cache and its locks are
            free (:mod:`stores._nowait`), and otherwise in a worker thread like
            every other call (the default: a cached read then costs no thread
            hop). Turn it off on a file system whose metadata calls can be
            slow (a network mount): they are not guarded.
        inline_writes: Whether a single write (``create``,
            ``create_derived``, ``put_hint``, ``replace_unsynced``) may run on
            the event loop (the default). A durable append is a ``pwrite`` and
            an ``fdatasync`` of 0.2-1 ms on a local SSD, and the two thread hops
            around it cost 0.2-0.5 ms more on a busy machine; blocking the loop
            for the append instead costs the task awaiting it nothing more. It
            runs here while this store's writes have been quick (their running
            average, syncs included, under :data:`INLINE_WRITE_BUDGET`; the
            workers' writes count too, so a disk that recovers gets its appends
            back) and nothing suggests concurrent appends, whose syncs should
            overlap in worker threads: no call of this process in flight there,
            and no append to another directory (thread) ended in the last 5 ms.
            Otherwise a durable append (``create`` of a record or blob) is
            written here all the same, and only its ``fdatasync`` runs elsewhere
            (see ``kernel_syncs``), after which the frame is indexed and the
            segment's thread lock and ``flock`` let go of: no reader sees the
            frame before it is durable.
            A lock another thread or process holds, or a torn tail to repair,
            sends the write to a worker thread before anything is written. After
            a write run here, the loop runs its other ready work (timers, other
            tasks) before the caller goes on, as after a hop.
        kernel_syncs: Whether the ``fdatasync`` of a durable append written on
            the loop among concurrent ones is handed to the kernel (Linux native
            AIO, ``stores._kernel_sync``; the default) rather than to a worker
            thread (``stores._offload.run_io_only``). The loop reaps the syncs'
            ends from an ``eventfd``: no thread takes the interpreter lock per
            sync, which made the loop wait for it around its own system calls.
            Where the kernel or a sandbox refuses AIO, the syncs go to the
            workers, as with this off.

    Raises:
        ValueError: ``lock_timeout`` is not positive, or the root cannot hold a
            directory.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        fsync: bool = True,
        segments: bool = True,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        inline_reads: bool = True,
        inline_writes: bool = True,
        kernel_syncs: bool = True,
    ) -> None:
        if not lock_timeout > 0:
            raise ValueError(f"lock_timeout must be positive, not {lock_timeout!r}")
        self._root = self.local_directory = _checked_root(root)
        self.fsync = fsync
        self.url = f"file://{self._root}"
        self.segments = segments
        # A thread's records sit side by side in a few segment files.
        self.reads_log_in_bulk = segments
        self.lock_timeout = lock_timeout
        self.inline_reads = inline_reads
        self.inline_writes = inline_writes
        self.kernel_syncs = kernel_syncs
        self._write_cost = 0.0  # running average of an append's seconds
        self._last_append = ("", 0.0)  # directory, monotonic time
        self._dirs: set[str] = set()
        # Directories whose entry this store has synced (see ensure_dirs).
        self._durable_dirs: set[str] = set()
        self._segs = SegmentSet(fsync, lock_timeout)
        # Directory keys already validated, with their paths: a commit's key only
        # needs its last part checked.
        self._dir_paths: dict[str, str] = {}

    @property
    def root(self) -> Path:
        """The store's directory, absolute."""
        from pathlib import Path  # not on a cold start: the store works on strings

        return Path(self._root)

    def _segmented(self, path: str) -> tuple[str, str] | None:
        """(directory, name) when the object at ``path`` lives in a segment."""
        directory, name = os.path.split(path)
        return (directory, name) if segment_of(name) is not None else None

    # --- helpers (run in a worker thread) -------------------------------------

    def _path(self, key: str) -> str:
        # One search for what _bad_part refuses in any part (an empty key, or one
        # starting with "/", has an empty part): a listing checks a thousand keys.
        if _BAD_KEY.search(key) is not None:
            raise ValueError(f"invalid object key {key!r}")
        return f"{self._root}/{key}"

    def _sync_dir(self, path: str) -> None:
        if self.fsync:
            fsync_dir(path)

    def _ensure_dir(self, directory: str) -> None:
        if directory not in self._dirs:
            ensure_dirs(
                directory,
                fsync=self.fsync,
                root=self._root,
                durable=self._durable_dirs,
            )
            self._dirs.add(directory)

    def _locate(self, key: str) -> tuple[str, str]:
        """(directory, name) of a key's object, validating it as ``_path`` does."""
        dir_key, sep, name = key.rpartition("/")
        directory = self._dir_paths.get(dir_key) if sep else None
        if directory is None or _bad_part(name):
            directory, name = os.path.split(self._path(key))
            if sep and len(self._dir_paths) < 4096:
                self._dir_paths[dir_key] = directory
        return directory, name

    def _publish(self, key: str, data: bytes, sync: bool = True) -> str:
        directory, name = self._locate(key)
        framed = segment_of(name) is not None
        if self.segments and framed:
            with _MapErrors(key):
                self._ensure_dir(directory)
                if not sync:
                    if not self._segs.create_many(
                        directory, [(name, data)], sync=False
                    )[0]:
                        raise ObjectExistsError(key)
                    return _etag(data)
                return self._segs.create(directory, name, data, key=key)
        path = os.path.join(directory, name)
        with _MapErrors(key):
            # First: the guard's segment file goes in this directory.
            self._ensure_dir(directory)
        with (
            _MapErrors(key),
            self._segs.guard_file(directory, name, key=key)
            if framed
            else nullcontext(),
        ):
            tmp = write_temp(
                directory, data, fsync=self.fsync and sync, prefix=_TMP_PREFIX
            )
            try:
                os.link(tmp, path)
            finally:
                os.unlink(tmp)
            if sync:
                self._sync_dir(directory)
        return _etag(data)

    def _begin_append(self, key: str, data: bytes) -> PendingCreate | None:
        """Write the record or blob ``key`` up to its sync (see :meth:`_writing`).

        None when ``key`` is not appended to a segment (nothing written then).
        """
        directory, name = self._locate(key)
        if not self.segments or segment_of(name) is None:
            return None
        with _MapErrors(key):
            self._ensure_dir(directory)
            return self._segs.create_unsynced(directory, name, data, key=key)

    def _finish_append(self, key: str, pending: PendingCreate) -> str:
        with _MapErrors(key):
            return pending.finish()

    def _flush(self, keys: Sequence[str]) -> None:
        if not self.fsync:
            return
        framed: dict[str, builtins.list[str]] = {}
        synced_dirs: set[str] = set()  # each directory's entries synced once
        for key in keys:
            directory, name = self._locate(key)
            if self.segments and segment_of(name) is not None:
                framed.setdefault(directory, []).append(name)
                continue
            with _MapErrors(key):
                try:
                    fd = os.open(os.path.join(directory, name), os.O_RDONLY)
                except FileNotFoundError:
                    # Maybe a frame written by a store with segments on.
                    framed.setdefault(directory, []).append(name)
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                synced_dirs.add(directory)
        for directory in sorted(synced_dirs):
            with _MapErrors(directory):
                fsync_dir(directory)
        for directory, names in framed.items():
            with _MapErrors(directory):
                self._segs.sync(directory, names)

    def _publish_many(
        self, items: Sequence[tuple[str, bytes]], sync: bool = True
    ) -> builtins.list[bool]:
        # Write every temporary file first and sync them together, then link them
        # all and sync each directory once: n + 1 syncs instead of 2n. Nothing is
        # linked before its bytes are durable, so no reader sees a partial object.
        created = [False] * len(items)
        staged: builtins.list[tuple[int, str, str, str]] = []  # i, key, path, temp
        framed: dict[str, builtins.list[int]] = {}  # directory -> items
        try:
            for i, (key, data) in enumerate(items):
                path = self._path(key)
                where = self._segmented(path)
                if self.segments and where is not None:
                    framed.setdefault(where[0], []).append(i)
                    continue
                directory = os.path.dirname(path)
                with _MapErrors(key):
                    self._ensure_dir(directory)
                    if os.path.exists(path) or (
                        # Written as a frame by a store with segments on.
                        where is not None
                        and self._segs.read(directory, where[1]) is not None
                    ):
                        continue
                    tmp = write_temp(directory, data, fsync=False, prefix=_TMP_PREFIX)
                staged.append((i, key, path, tmp))
            # Even unsynced (derived) objects are linked only once their bytes are
            # durable: a torn file under a content-addressed name would stay, and
            # every later writer of that name would keep it.
            if self.fsync:
                for _, key, _, tmp in staged:
                    with _MapErrors(key):
                        fd = os.open(tmp, os.O_RDONLY)
                        try:
                            os.fsync(fd)
                        finally:
                            os.close(fd)
            for i, key, path, tmp in staged:
                # A racing writer of the same key wrote the same content: not ours.
                with _MapErrors(key), contextlib.suppress(FileExistsError):
                    os.link(tmp, path)
                    created[i] = True
            linked = {os.path.dirname(path) for i, _, path, _ in staged if created[i]}
            for directory in sorted(linked) if sync else ():
                with _MapErrors(directory):
                    self._sync_dir(directory)
            for directory, positions in framed.items():
                # One write and one sync per segment for all of them.
                with _MapErrors(items[positions[0]][0]):
                    self._ensure_dir(directory)
                    done = self._segs.create_many(
                        directory,
                        [
                            (os.path.basename(self._path(items[i][0])), items[i][1])
                            for i in positions
                        ],
                        sync=sync,
                    )
                for i, ok in zip(positions, done, strict=True):
                    created[i] = ok
        finally:
            for *_, tmp in staged:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        return created

    def _put_hint(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if self._segmented(path) is not None:
            self._swap(key, data, None)
            return
        directory = os.path.dirname(path)
        with _MapErrors(key):
            self._ensure_dir(directory)
            # rename is atomic: readers see the old hint or the new one, and a
            # crash may lose it, which a hint allows.
            rename_into_place(
                write_temp(directory, data, fsync=False, prefix=_TMP_PREFIX), path
            )

    def _swap(
        self, key: str, data: bytes, if_match: str | None, sync: bool = True
    ) -> str:
        path = self._path(key)
        if self.segments and (where := self._segmented(path)) is not None:
            with _MapErrors(key):
                self._ensure_dir(where[0])
                return self._segs.replace(
                    where[0], where[1], data, if_match, key=key, sync=sync
                )
        directory, name = os.path.split(path)
        with _MapErrors(key):
            self._ensure_dir(directory)
            lock_path = os.path.join(directory, f".{name}.lock")
            lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                flock_within(lock_fd, lock_path, timeout=self.lock_timeout)
                # Opened under the lock: a file renamed over the path before it
                # was taken is the one compared (and overwritten) here.
                if if_match is not None and _compare_and_overwrite(
                    path, data, if_match, key, in_place=not sync
                ):
                    return _etag(data)
                tmp = write_temp(
                    directory, data, fsync=self.fsync and sync, prefix=_TMP_PREFIX
                )
                rename_into_place(tmp, path)
                if sync:
                    self._sync_dir(directory)
            finally:
                os.close(lock_fd)  # closing the descriptor releases the flock
        return _etag(data)

    def _read(self, key: str) -> tuple[bytes, str]:
        data = self._read_many([key])[0]
        if data is None:
            raise ObjectNotFoundError(key)
        return data, _etag(data)

    def _read_many(self, keys: Sequence[str]) -> builtins.list[bytes | None]:
        return cast("list[bytes | None]", self._read_buffers(keys, False))

    def _read_buffers(
        self, keys: Sequence[str], views: bool = True
    ) -> builtins.list[bytes | memoryview | None]:
        out: list[bytes | memoryview | None] = [None] * len(keys)
        # Grouped by directory (each validated once, each segment opened once);
        # segment objects first, and whatever is not there may be a plain file
        # (written with segments=False).
        by_dir: dict[str, tuple[builtins.list[int], builtins.list[str]]] = {}
        for i, key in enumerate(keys):
            directory, name = self._locate(key)
            group = by_dir.get(directory)
            if group is None:
                group = by_dir[directory] = ([], [])
            group[0].append(i)
            group[1].append(name)
        for directory, (positions, names) in by_dir.items():
            key_of = [keys[i] for i in positions].__getitem__
            found = self._read_in(directory, names, key_of, views=views)
            for i, data in zip(positions, found, strict=True):
                out[i] = data
        return out

    def _read_in(
        self,
        directory: str,
        names: Sequence[str],
        key_of: Callable[[int], str],
        *,
        views: bool = False,
    ) -> builtins.list[bytes | memoryview | None]:
        """Objects ``names`` of one directory (``key_of(i)`` names the i-th in errors).

        ``views``: see :meth:`stores.segments.SegmentSet.read_views`.
        """
        with _MapErrors(key_of(0)):
            found = self._segs.read_views(directory, names, views)
        if None not in found:
            return found
        for i, data in enumerate(found):
            if data is None:  # perhaps a plain file (written with segments=False)
                try:
                    with _MapErrors(key_of(i)):
                        found[i] = read_whole(os.path.join(directory, names[i]))
                except ObjectNotFoundError:
                    pass
        return found

    def _read_siblings(
        self, prefix: str, names: Sequence[str], views: bool = False
    ) -> builtins.list[bytes | memoryview | None]:
        check_sibling_prefix(prefix)
        if not names:
            return []
        directory, _ = self._locate(prefix + names[0])
        if not _CHECKED_NAMES.issuperset(names):
            for name in names:
                if _bad_part(name) or "/" in name:
                    raise ValueError(f"invalid object key {prefix + name!r}")
            if len(_CHECKED_NAMES) > _CHECKED_NAMES_MAX:
                _CHECKED_NAMES.clear()
            _CHECKED_NAMES.update(names)
        return self._read_in(directory, names, lambda i: prefix + names[i], views=views)

    def _dir_of(self, prefix: str) -> tuple[str, str]:
        prefix = prefix.strip("/")
        if not prefix:
            return self._root, ""
        return self._path(prefix), prefix + "/"

    def _list(
        self, prefix: str, start_after: str | None, hidden: bool
    ) -> builtins.list[str]:
        directory, base = self._dir_of(prefix)
        out: list[str] = []
        with _MapErrors(prefix):
            try:
                for dirpath, sub, filenames in _walk_files(directory, base):
                    for name in filenames:
                        if is_segment(name):
                            out.extend(
                                self._segment_keys(
                                    dirpath, sub, name, start_after, hidden
                                )
                            )
                            continue
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

    def _segment_keys(
        self,
        dirpath: str,
        sub: str,
        segment: str,
        start_after: str | None,
        hidden: bool,
    ) -> builtins.list[str]:
        if hidden:
            # Only a tail that is provably an interrupted write is a harmless
            # leftover; any other is reported by ``quarantined``.
            tail = self._segs.inspect_tail(dirpath, segment)
            if tail.torn and (tail.cut is None or tail.cut.torn):
                return [f"{sub}{segment} (torn tail: {tail.torn} bytes)"]
            return []
        if start_after is not None and start_after.startswith(sub):
            # Segments hold contiguous ranges of versions: skip the older ones.
            first = first_segment_after(start_after[len(sub) :])
            if first is not None and segment < first and segment[5:].isdigit():
                return []
        names = self._segs.names(dirpath, segment)
        if start_after is None:
            return [sub + name for name in names]
        if start_after.startswith(sub):
            # Compared by name: sub + name > start_after exactly when this holds.
            after = start_after[len(sub) :]
            return [sub + name for name in names if name > after]
        return [sub + name for name in names if sub + name > start_after]

    def _quarantined(self, prefix: str) -> builtins.list[Quarantined]:
        directory, base = self._dir_of(prefix)
        out: list[Quarantined] = []
        with _MapErrors(prefix):
            for dirpath, sub, filenames in _walk_files(directory, base):
                for name in sorted(filenames):
                    if is_segment(name):
                        out.extend(self._damaged_in_place(dirpath, sub, name))
                        continue
                    if not name.startswith(QUARANTINE_PREFIX):
                        continue
                    path = os.path.join(dirpath, name)
                    with open(path, "rb") as fh:
                        cut = inspect_cut(fh.read())
                    key = None
                    if cut.name is not None and segment_of(cut.name) is not None:
                        key = sub + cut.name
                    out.append(Quarantined(path, key, cut.data, cut.torn, cut.detail))
        return out

    def _damaged_in_place(
        self, dirpath: str, sub: str, segment: str
    ) -> builtins.list[Quarantined]:
        """A segment's repaired last frames and its tail that may be acknowledged."""
        tail = self._segs.inspect_tail(dirpath, segment)
        path = os.path.join(dirpath, segment)
        out = [
            Quarantined(
                f"{path} at offset {offset}",
                sub + name,
                None,
                False,
                "its frame's header fails its checksum and checks out with one "
                "flipped bit put back; its data checksum holds, so readers read it "
                "so",
                in_place=True,
            )
            for name, offset in sorted(tail.repaired.items())
        ]
        cut = tail.cut
        if tail.torn and cut is not None and not cut.torn:
            key = None
            if cut.name is not None and segment_of(cut.name) is not None:
                key = sub + cut.name
            out.append(
                Quarantined(
                    f"{path} from offset {tail.end} (not cut yet)",
                    key,
                    cut.data,
                    False,
                    f"a torn-looking tail of {tail.torn} bytes: {cut.detail}",
                    in_place=True,
                )
            )
        return out

    def _holds_objects(self, directory: str) -> bool:
        # Directories outlive their last object (delete leaves them in place, so a
        # racing create never loses its directory). As on an object store, only a
        # directory that still holds an object is a child.
        for dirpath, _, filenames in _walk_files(directory, ""):
            if any(not name.startswith(".") for name in filenames) or any(
                is_segment(name)
                and self._segs.holds_objects(os.path.join(dirpath, name))
                for name in filenames
            ):
                return True
        return False

    def _descendants(
        self, prefix: str, pattern: Sequence[str | None]
    ) -> builtins.list[tuple[str, ...]]:
        # One call walks the whole pattern: a level at a time through the event
        # loop would cost a worker-thread hop per directory (a thousand threads,
        # a thousand hops). A wildcard costs one scandir per directory, whose
        # entries' types come with the names (no stat); a fixed name costs
        # nothing. Only the last level's paths need proof that they hold objects:
        # an ancestor holds whatever they hold.
        prefix = prefix.strip("/")
        directory, _ = self._dir_of(prefix)
        found: builtins.list[tuple[tuple[str, ...], str]] = [((), directory)]
        scandir = os.scandir
        try:
            for name in pattern:
                if name is not None:
                    # Through _path, so a name a key may not hold is refused
                    # exactly as children() of that prefix would refuse it.
                    self._path(f"{prefix}/{name}" if prefix else name)
                    found = [((*n, name), f"{p}/{name}") for n, p in found]
                    continue
                deeper: builtins.list[tuple[tuple[str, ...], str]] = []
                add = deeper.append
                for names, path in found:
                    try:
                        with scandir(path) as entries:
                            for entry in entries:
                                child = entry.name
                                if child[0] != "." and entry.is_dir(
                                    follow_symlinks=False
                                ):
                                    add(((*names, child), f"{path}/{child}"))
                    except (FileNotFoundError, NotADirectoryError):
                        continue
                found = deeper
            return sorted(names for names, path in found if self._is_holder(path))
        except OSError as exc:
            raise StorageError(
                f"local storage failed listing under {prefix!r}: {exc}"
            ) from exc

    def _is_holder(self, path: str) -> bool:
        """Whether the directory ``path`` holds an object.

        A journal thread's directory holds its LEASE file: one stat, where the
        walk of :meth:`_holds_objects` would read every directory below.
        """
        try:
            if S_ISREG(os.stat(f"{path}/{LEASE_NAME}").st_mode):
                return True
        except (FileNotFoundError, NotADirectoryError):
            pass
        return self._holds_objects(path)

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
        where = self._segmented(path)
        if where is not None:
            with _MapErrors(key):
                if self._segs.delete(where[0], where[1]):
                    return True
        with _MapErrors(key):
            try:
                os.unlink(path)
            except FileNotFoundError:
                return False
            self._sync_dir(os.path.dirname(path))
        return True

    async def _reading(
        self,
        fn: Callable[..., _T],
        *args: Any,
        cold: Callable[..., _T] | None = None,
    ) -> _T:
        """Run the read ``fn(*args)`` here if it cannot block, else in a worker.

        With no event loop running (``journal.loopless.run_sync``) it runs here,
        blocking: there is no loop to keep free, and a no-wait attempt that fails
        would only have read part of the bytes to read them again. ``cold``, if
        given, is what the worker runs instead of ``fn``: the bytes were not all
        in the page cache.
        """
        if not loop_running():
            return fn(*args)
        if self.inline_reads:
            try:
                with attempt():
                    return fn(*args)
            except WouldBlock as exc:
                if exc.unsupported:
                    self.inline_reads = False  # this file system cannot say
        return await run_blocking(cold or fn, *args)

    async def _writing(
        self, fn: Callable[..., _T], *args: Any, durable_in: str | None = None
    ) -> _T:
        """Run the write ``fn(*args)`` here when that is cheap, else in a worker.

        ``durable_in`` names the directory of a durable append, which ``fn`` is
        then: ``_publish(key, data)``. One to another directory than the last
        one, shortly after it ended, means several threads are being written at
        once, and their syncs should overlap: the frame is then written here and
        only its sync runs elsewhere, in the kernel (:meth:`_kernel_synced`) or
        else in a worker.
        """
        try:
            if self.inline_writes:
                last_directory, last_end = self._last_append
                alone = (
                    durable_in is None
                    or durable_in == last_directory
                    or time.monotonic() - last_end > _CONCURRENT_WINDOW
                )
                if alone and self._quiet():
                    done = self._write_here(fn, *args)
                    if done is not None:
                        if durable_in is not None:
                            # Noted now, not after the pause: an append another
                            # task makes meanwhile is concurrent with this one.
                            # Noted after it, each task coming back found its own
                            # append the last one, and every sync ran here.
                            self._last_append = (durable_in, time.monotonic())
                            durable_in = None
                        # Let the rest of the loop run (timers such as lease
                        # renewals, other tasks) between appends, as a hop does.
                        await pause()
                        return done[0]
                elif durable_in is not None:
                    begun = self._attempt_write(self._begin_append, *args)
                    pending = None if begun is None else begun[0]
                    if pending is not None:
                        if self.kernel_syncs:
                            synced = await self._kernel_synced(args[0], pending)
                            if synced is not None:
                                return cast("_T", synced[0])
                        # The worker runs one system call and almost no Python,
                        # instead of competing with the loop for the interpreter
                        # around each of the append's calls.
                        etag = await run_io_only(
                            self._timed, self._finish_append, args[0], pending
                        )
                        return cast("_T", etag)
            return await run_blocking(self._timed, fn, *args)
        finally:
            if durable_in is not None:
                self._last_append = (durable_in, time.monotonic())

    async def _kernel_synced(
        self, key: str, pending: PendingCreate
    ) -> tuple[str] | None:
        """Finish ``pending`` with its sync done by the kernel: ``(etag,)``.

        None when this loop cannot have kernel syncs, the append needs its
        directory synced too (a segment's first), or the kernel refused this one
        (nothing was submitted): the caller hands the sync to a worker.
        """
        syncs = kernel_syncs_here()
        fd = pending.sync_fd
        if syncs is None or fd is None:
            return None
        start = time.perf_counter()

        def complete(error: OSError | None) -> str:
            self._cost(time.perf_counter() - start)
            with _MapErrors(key):
                return pending.finish_synced(error)

        op = syncs.submit(fd, complete)
        if op is None:
            return None
        return (await syncs.wait(op),)

    def _quiet(self) -> bool:
        """Whether a write may run on the loop now.

        Nothing of this process is in a worker or a kernel sync (the write could
        wait behind it, and means appends are concurrent), and the store's writes
        have been quick.
        """
        return (
            self.inline_writes
            and not in_flight()
            and not kernel_syncs_in_flight()
            and self._write_cost < INLINE_WRITE_BUDGET
        )

    def _write_here(self, fn: Callable[..., _T], *args: Any) -> tuple[_T] | None:
        """:meth:`_attempt_write`, its time counted in the inline-write average."""
        start = time.perf_counter()
        done = self._attempt_write(fn, *args)
        if done is not None:
            self._cost(time.perf_counter() - start)
        return done

    def _attempt_write(self, fn: Callable[..., _T], *args: Any) -> tuple[_T] | None:
        """Run the write ``fn(*args)`` here in no-wait mode: ``(its result,)``.

        None when it would have to wait (a lock held elsewhere, a torn tail to
        repair): nothing was written. A file system that cannot tell turns
        ``inline_writes`` off.
        """
        try:
            with attempt():
                return (fn(*args),)
        except WouldBlock as exc:
            if exc.unsupported:
                self.inline_writes = False
            return None

    def _timed(self, fn: Callable[..., _T], *args: Any) -> _T:
        start = time.perf_counter()
        result = fn(*args)
        self._cost(time.perf_counter() - start)
        return result

    def _cost(self, seconds: float) -> None:
        # An exponential average over about the last eight appends: one slow sync
        # does not send the next appends away, a slow disk does within a few.
        self._write_cost += (seconds - self._write_cost) / 8

    # --- the protocol ----------------------------------------------------------

    async def aclose(self) -> None:
        """Close the segment files kept open for writing (reopened on next use)."""
        await run_blocking(self._segs.close)

    async def create(self, key: str, data: bytes) -> str:
        directory, _, name = key.rpartition("/")
        # Records and blobs are the appends; a LEASE or an index entry is no sign
        # of another thread being written, and appends that are not synced have
        # no syncs to overlap in workers.
        durable = self.fsync and segment_of(name) is not None
        return await self._writing(
            self._publish, key, data, durable_in=directory if durable else None
        )

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        return await run_blocking(self._swap, key, data, if_match)

    async def create_many(
        self, items: Sequence[tuple[str, bytes]], *, concurrency: int = 16
    ) -> builtins.list[bool]:
        return await run_blocking(self._publish_many, items)

    async def put_hint(self, key: str, data: bytes) -> None:
        await self._writing(self._put_hint, key, data)

    async def replace_unsynced(
        self, key: str, data: bytes, *, if_match: str | None
    ) -> str:
        """:meth:`replace`, without syncs; in place when ``data`` is the file's size.

        A holder's lease renewals, idle marks and release (encoded at one size per
        holder): renaming a new file over the old one made ext4 write the new
        file's data back at once (``auto_da_alloc``), 0.2-0.4 ms a call here, two
        per warm ``Agent.call``. The overwrite is ``pwrite`` into the file, under
        the same lock and compare as the rename; a reader that races it may copy
        the object half old, half new (lease readers read it again). Another
        size, or no ``if_match``, still writes a new file and renames it.
        """
        return await self._writing(self._swap, key, data, if_match, False)

    async def create_derived(self, key: str, data: bytes) -> bool:
        try:
            await self._writing(self._publish, key, data, False)
        except ObjectExistsError:
            return False
        return True

    async def create_many_derived(
        self, items: Sequence[tuple[str, bytes]]
    ) -> builtins.list[bool]:
        # Segment frames go on the loop while it is quiet, up to INLINE_FRAME_MAX
        # bytes a write, the loop's other work (a writer's commits) running between
        # the writes: in one worker call, a commit made meanwhile waited for the
        # whole batch (a checkpoint past the span limit writes some 600 KiB of
        # chunks); a write per chunk paid the segment's lock and checks twenty
        # times over. Plain files, a larger frame, and what the loop cannot write
        # now go to a worker, the rest of the batch in one call.
        created: builtins.list[bool] = []
        if loop_running() and self.segments:
            while len(created) < len(items) and self._quiet():
                group = self._inline_group(items, len(created))
                if not group:
                    break
                done = self._write_here(self._publish_many, group, False)
                if done is None:
                    # A lock held elsewhere, found before anything was written:
                    # a group is one segment's frames.
                    break
                created += done[0]
                await pause()
        if len(created) < len(items):
            created += await run_blocking(
                self._publish_many, items[len(created) :], False
            )
        return created

    def _inline_group(
        self, items: Sequence[tuple[str, bytes]], start: int
    ) -> Sequence[tuple[str, bytes]]:
        """The items from ``start`` that one write on the loop takes.

        Frames of one segment file, INLINE_FRAME_MAX bytes in all at most; none
        when the first is larger, or a plain file. One segment, so that a lock
        found held stops the write before any of it lands.
        """
        where: tuple[str, str | None] | None = None
        size = 0
        end = start
        for key, data in items[start:]:
            found = self._segmented(self._path(key))
            if found is None:
                break
            segment = (found[0], segment_of(found[1]))
            if where is not None and segment != where:
                break
            size += len(data)
            if size > INLINE_FRAME_MAX:
                break
            where = segment
            end += 1
        return items[start:end]

    async def flush(self, keys: Sequence[str]) -> None:
        await run_blocking(self._flush, keys)

    async def mark_unsynced(self, prefix: str) -> None:
        if not self.fsync:
            await run_blocking(self._mark_unsynced, prefix)

    def _mark_unsynced(self, prefix: str) -> None:
        directory, _ = self._dir_of(prefix)
        with _MapErrors(prefix):
            self._ensure_dir(directory)
            marker = os.path.join(directory, _UNSYNCED)
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))

    async def make_durable(self, prefix: str) -> None:
        if not self.fsync:
            return
        directory, _ = self._dir_of(prefix)
        marker = os.path.join(directory, _UNSYNCED)
        # On the loop: a stat, which the kernel answers from its caches for a
        # thread just loaded. Only a flagged thread pays for a worker's syncs.
        if os.path.lexists(marker):  # noqa: ASYNC240
            await run_blocking(self._make_durable, directory, marker)

    def _make_durable(self, directory: str, marker: str) -> None:
        """Sync every file and directory under ``directory``, and the way to it.

        The marker goes last, once all of it is durable: a crash before leaves it,
        and the next writer that syncs does this again.
        """
        with _MapErrors(directory):
            directories: builtins.list[str] = []
            for dirpath, _, names in _walk_files(directory, ""):
                for name in names:
                    try:
                        fd = os.open(
                            os.path.join(dirpath, name), os.O_RDONLY | os.O_NOFOLLOW
                        )
                    except OSError:  # gone since the listing, or a symbolic link
                        continue
                    try:
                        os.fdatasync(fd)
                    finally:
                        os.close(fd)
                directories.append(dirpath)
            for dirpath in directories:
                fsync_dir(dirpath)
            # The new directories' own entries, up to the store's root.
            parent = directory
            while len(parent) > len(self._root):
                up = os.path.dirname(parent)
                if up == parent:
                    break
                parent = up
                fsync_dir(parent)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker)
            fsync_dir(directory)

    async def read(self, key: str) -> tuple[bytes, str]:
        return await self._reading(self._read, key)

    async def read_many(
        self, keys: Sequence[str], *, concurrency: int = 16
    ) -> builtins.list[bytes | None]:
        if len(keys) == 1 and keys[0].endswith(_HINT_TAIL):
            return await self._reading(self._read_many, keys, cold=self._read_cold_hint)
        return await self._reading(self._read_many, keys)

    def _read_cold_hint(self, keys: Sequence[str]) -> builtins.list[bytes | None]:
        """:meth:`_read_many` of a thread's ``LAST_CHECKPOINT`` that was not cached.

        A load reads the hint, then the checkpoint it names, then the records
        from that version's segment: when the hint had to come from the disk, so
        will they. The kernel is asked for both files (``POSIX_FADV_WILLNEED``)
        before the hint is returned, so that their reads overlap instead of
        following each other: a load whose files had all left the page cache
        took about 0.85x the time.
        """
        data = self._read_many(keys)
        version = 0 if data[0] is None else parse_hint(data[0])
        if version and _WILL_NEED is not None:
            thread = ThreadLayout(keys[0][: -len(_HINT_TAIL)])
            for key in (thread.checkpoint_key(version), thread.record_key(version)):
                directory, name = self._locate(key)
                segment = segment_of(name) if self.segments else None
                _will_need(os.path.join(directory, segment or name))
        return data

    async def read_buffers(
        self, keys: Sequence[str]
    ) -> builtins.list[bytes | memoryview | None]:
        return await self._reading(self._read_buffers, keys)

    async def read_siblings(
        self, prefix: str, names: Sequence[str]
    ) -> builtins.list[bytes | None]:
        found = await self._reading(self._read_siblings, prefix, names)
        return cast("list[bytes | None]", found)

    async def read_sibling_buffers(
        self, prefix: str, names: Sequence[str]
    ) -> builtins.list[bytes | memoryview | None]:
        return await self._reading(self._read_siblings, prefix, names, True)

    async def exist_many(self, keys: Sequence[str]) -> builtins.list[bool]:
        return await self._reading(self._exist_many, keys)

    def _exist_many(self, keys: Sequence[str]) -> builtins.list[bool]:
        # A plain file is one stat; an object kept in a segment is looked up there.
        # Thread listing asks for a thousand LEASEs at once: the names repeat (so
        # each is classified once), the stats are relative to the root (a shorter
        # path walk), and only a failure pays for mapping errors.
        out: list[bool] = []
        framed: list[int] = []
        in_segment: dict[str, bool] = {}
        stat = os.stat
        try:
            root_fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:  # nothing was stored yet
            for key in keys:
                self._path(key)
            return [False] * len(keys)
        except OSError:
            with _MapErrors(keys[0] if keys else ""):
                raise
        if _maybe_bad_keys("\n".join(keys)):
            for key in keys:
                self._path(key)  # names the bad key (or finds a newline: no harm)
        try:
            for i, key in enumerate(keys):
                name = key[key.rfind("/") + 1 :]
                framed_name = in_segment.get(name)
                if framed_name is None:
                    framed_name = in_segment[name] = segment_of(name) is not None
                if framed_name:
                    framed.append(i)
                    out.append(False)
                    continue
                try:
                    mode = stat(key, dir_fd=root_fd).st_mode
                except (FileNotFoundError, NotADirectoryError):
                    out.append(False)
                    continue
                except OSError:
                    with _MapErrors(key):
                        raise
                out.append(S_ISREG(mode))
        finally:
            os.close(root_fd)
        if framed:
            found = self._read_many([keys[i] for i in framed])
            for i, data in zip(framed, found, strict=True):
                out[i] = data is not None
        return out

    async def list(
        self, prefix: str, *, start_after: str | None = None
    ) -> builtins.list[str]:
        return await self._reading(self._list, prefix, start_after, False)

    async def list_and_read(
        self, prefix: str, *, start_after: str | None = None, limit: int
    ) -> tuple[builtins.list[str], builtins.list[bytes | None]]:
        return await self._reading(self._list_and_read, prefix, start_after, limit)

    def _list_and_read(
        self, prefix: str, start_after: str | None, limit: int
    ) -> tuple[builtins.list[str], builtins.list[bytes | None]]:
        keys = self._list(prefix, start_after, False)
        if limit <= 0:
            return keys, []
        wanted = keys[:limit]
        directory, base = self._dir_of(prefix)
        names = [key[len(base) :] for key in wanted]
        if any("/" in name for name in names):
            return keys, self._read_many(wanted)
        # The listing found these names in this directory: read them from its
        # segments by name, without locating and validating each key again.
        with _MapErrors(prefix):
            data = self._segs.read_many(directory, names)
        missing = [i for i, found in enumerate(data) if found is None]
        if missing:  # plain files (written with segments=False), or gone since
            again = self._read_many([wanted[i] for i in missing])
            for i, found in zip(missing, again, strict=True):
                data[i] = found
        return keys, data

    async def remove_leftovers(self, prefix: str, *, older_than: float) -> int:
        return await run_blocking(self._remove_leftovers, prefix, older_than)

    def _remove_leftovers(self, prefix: str, older_than: float) -> int:
        directory, _ = self._dir_of(prefix)
        cutoff = time.time() - older_than
        removed = 0
        with _MapErrors(prefix):
            for dirpath, _, filenames in _walk_files(directory, ""):
                for name in filenames:
                    if not name.startswith(_TMP_PREFIX):
                        continue
                    path = os.path.join(dirpath, name)
                    with contextlib.suppress(FileNotFoundError):
                        if os.stat(path).st_mtime < cutoff:
                            os.unlink(path)
                            removed += 1
        return removed

    async def leftovers(self, prefix: str) -> builtins.list[str]:
        return await run_blocking(self._list, prefix, None, True)

    async def quarantined(self, prefix: str) -> builtins.list[Quarantined]:
        """Bytes cut from torn-looking segment tails under ``prefix``, kept aside.

        Before a writer clears a segment's torn-looking tail it copies the bytes
        to ``.quarantine-<segment>-<offset>-<random>`` beside the segment (synced,
        with its directory). Each is reported with what its bytes are: an
        interrupted write (``torn``), or possibly an acknowledged record whose
        frame header rotted (see :func:`stores.segments.inspect_cut`). Deleting
        the file, once decided, is the operator's call.
        """
        return await run_blocking(self._quarantined, prefix)

    async def delete(self, key: str) -> bool:
        return await run_blocking(self._delete, key)

    async def children(self, prefix: str) -> builtins.list[str]:
        return await self._reading(self._children, prefix)

    async def descendants(
        self, prefix: str, pattern: Sequence[str | None]
    ) -> builtins.list[tuple[str, ...]]:
        return await self._reading(self._descendants, prefix, pattern)
