"""Append-only segment files: the local store's one-sync home for log records.

Publishing each record as its own file costs two syncs (the file, then its
directory). A segment file costs one: a record is appended to an open file under an
exclusive ``flock`` (into its reserve, below) and ``fdatasync``-ed before the append
is acknowledged. The
object-store contract is unchanged: ``create`` is still exclusive (the name is
checked against the segment's index under the lock), and no reader ever sees a
partial object (a frame is visible only once complete and checksummed).

Which names live in segments: ``<20 digits>.rec`` (a journal record), in segment
``.seg-<version // RECORDS_PER_SEGMENT>`` of its directory, so that reading the tail
of a long log scans only the newest segment. Other names ending in ``.rec`` share
``.seg-other``; content-addressed blobs (64 lowercase hex digits, the journal's
``blobs/<sha256>``) share ``.seg-blobs``, where :meth:`SegmentSet.create_many`
appends a batch with one write and one sync. Everything else stays a file.

A frame (the first frame of a segment is its random 16-byte file id, kind 3, so
that a cached index is never applied to a new file that reused the inode number)::

    0      4  magic "AJF1"
    4      1  kind: 1 = put, 2 = tombstone (delete), 3 = file id
    5      2  name length N
    7      4  data length L
    11     N  name (UTF-8)
    11+N   4  CRC-32 of bytes [0, 11+N)           (the header)
    15+N   L  data
    15+N+L 4  CRC-32 of the data

The reserve: a record segment is extended by zero bytes beyond its frames (written
and synced with the frames that did not fit), and later frames are written in place
over them. Appending would make every ``fdatasync`` commit the new file size to the
file system's journal as well as flush the data; writing into blocks already
allocated and written spares that (measured in ``bench_commit.py``). The reserve
grows with the segment (:func:`reserve_for`: a sixteenth of its frames, from
:data:`MIN_RESERVE` up to :data:`RESERVE`), so that a short thread carries a few KiB
of zeros and a long one extends its file once per 64 KiB; closing the store cuts the
reserves off (:meth:`_Segment.trim_reserve`). Four zero bytes where a frame would
start end the frames, and so does the end of the file. Since a frame in the reserve
becomes visible byte by byte, readers take a shared ``flock`` while they index new
frames; writers hold the exclusive one from their index check to their sync.

Torn tails and corruption: a writer killed mid-append can leave an incomplete frame
at the end of a segment, never acknowledged. Readers stop at it; the next writer
overwrites it with zeros under the lock before appending (zeros end the frames,
as the reserve's do). A frame is *torn* when the file ends
inside it, or its header checksum fails with nothing valid after it, or it is followed
by the reserve and fails its data checksum with a 512-byte sector's share of it all
zeros (a write into the reserve lands in whole pages when its writer is killed, in
whole sectors when the power goes). A frame whose header checks out is never searched
for frames (record data may quote them). Any other frame whose data checksum fails is
*corrupt*: it is kept and its bytes are returned, so the journal's own record checksum
reports it (naming the version) and nothing is truncated. An invalid region followed
by valid frames is corruption too: readers skip to the next valid frame and never
truncate it. One flipped bit in the very last frame's header would make it look
torn: readers put each candidate bit back, and when the header then checks out and
the data passes its checksum they index the frame as valid (noted in the index as
repaired, so ``verify`` reports the damage) and writers append after it. The
residual ambiguities, for the very last frame only: more damage to its header looks
torn, and so does bit rot in its data if a sector's share of it is zeros.

Quarantine: so that such an acknowledged frame is never destroyed, the writer that
cuts a tail first copies the cut bytes (up to the last non-zero one; a tail of zeros
holds nothing) to ``.quarantine-<segment>-<offset>-<random>`` beside the segment,
syncing the file and its directory before it clears them. :func:`inspect_cut` tells
what the bytes are: a frame whose header checks out and whose bytes stop short of
its end (by more than the checksums it ends in) is an interrupted write, never
acknowledged, and is cut without a copy; a frame whose header passes
its checksum once one flipped bit is put back, and whose data passes its own, is an
acknowledged object with a rotted header, and its bytes are recovered; anything else
cannot be told apart and is reported as possibly acknowledged. The local store's
``quarantined()`` lists them, and ``verify`` reports all but the first kind as
problems.

Lock waits are bounded: a writer stopped (SIGSTOP) or hung inside an append keeps
the exclusive ``flock``, and every other writer and reader of the segment waits for
it at most ``lock_timeout`` seconds, polling without blocking, then fails with a
transient ``StorageError`` naming the file and the holder's pid. Taking over without
the lock is not safe, so the wait is the answer: the stopped writer has already
checked that its name is free and chosen the offset it writes at; resumed, it
would finish its write there, over whatever a new writer appended meanwhile (an
acknowledged record, of a higher lease epoch), and no check of ours runs between
its resumption and its ``pwrite``. The epoch fencing guards the log's slots, not
the bytes of a segment: only the lock does. A holder that is killed lets go of the
lock at once; one that is continued finishes its append (its record then holds its
slot, and the new writer's fence record goes after it, as after any race).

A segment whose every object was deleted is unlinked (retention and erasure free
space segment by segment); other deletions append a tombstone.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import operator
import os
import re
import struct
import threading
import weakref
from typing import TYPE_CHECKING, cast

import msgspec

from journal import layout
from journal.checksum import crc32
from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
)
from stores._files import DEFAULT_LOCK_TIMEOUT, flock_within, fsync_dir, write_temp
from stores._nowait import WouldBlock, acquire, active, held, pread, pread_buffer
from stores._statx import FileStatus, fd_status, path_status

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = [
    "CACHED_MAX",
    "QUARANTINE_PREFIX",
    "RECORDS_PER_SEGMENT",
    "SEGMENT_PREFIX",
    "CutTail",
    "PendingCreate",
    "SegmentSet",
    "SegmentTail",
    "inspect_cut",
    "reserve_for",
    "segment_of",
]

RECORDS_PER_SEGMENT = 1024
SEGMENT_PREFIX = ".seg-"
QUARANTINE_PREFIX = ".quarantine-"
"""Files holding the bytes cut from a torn-looking tail: see the module docstring."""
_MAGIC = b"AJF1"
_HEAD = struct.Struct(">4sBHI")
_CRC = struct.Struct(">I")
_PUT, _TOMBSTONE, _FILE_ID = 1, 2, 3
_SHORT = "short"  # a frame whose header checks out but whose bytes end early
_NEED = "need"  # a frame whose header lies past the end of the window read
_WINDOW = 256 * 1024  # how much of a segment an index scan reads at a time
_SMALL_WINDOW = 4096  # ... after a frame larger than this, whose data it skips
_RECORD = layout.RECORD_NAME
_BLOB = layout.BLOB_NAME
_SEGMENT = re.compile(rf"^\.seg-(\d{{{layout.VERSION_WIDTH}}}|other|blobs)$")
_NUMBERED = re.compile(rf"^\.seg-\d{{{layout.VERSION_WIDTH}}}$")
MAX_OPEN = 64
"""Segments of one store whose writers' descriptor stays open between writes."""
CACHED_MAX = 256
"""Segments of one store kept indexed when idle (the least recently used go first).

An index holds every live name of its file (about 25 KB for a segment of 100
records, ten times that full), so a process reading many threads once, a server
or a tool walking a store, kept one for every segment it ever read. A segment is
idle when its writers' descriptor is closed and no thread holds its lock; the ones
whose descriptor is open (:data:`MAX_OPEN`) or whose reserve is still to be cut
are kept besides. A dropped index is rebuilt from the file when the segment is
used again, as a new process would rebuild it.
"""
UNTRIMMED_MAX = 4096
"""Record segments closed to keep :data:`MAX_OPEN` whose reserves closing the store
still cuts (the most recent; each cut opens the file again, about 0.1 ms)."""
RESERVE = 64 * 1024
"""The most zero bytes a record segment is extended by ahead of its frames (above)."""
MIN_RESERVE = 4 * 1024
"""The fewest zero bytes a thread's first record segment is extended by.

A thread's later segments are extended by :data:`RESERVE` from their first frame:
the thread filled the one before, so it is not a small one, and a new segment
growing from a few KiB extended its file (a commit of its size with the sync)
at every other append at first (30 of the 100 appends after the 1,024th record,
each 0.26-0.31 ms against 0.13-0.15 for the others, measured).
"""
RESERVE_SHARE = 16
"""Below :data:`RESERVE`, a reserve is the segment's frames divided by this."""
_ZERO_WORD = bytes(4)
_Buffer = bytes | bytearray  # a scan's window: bytearray when read without waiting
WHOLE_READ_MAX = 64 * 1024 * 1024
"""The largest segment a reader with no index of it yet reads whole to index it.

Indexing reads a segment a window at a time, and a read of many of its objects
then reads their bytes again. A reader that has not indexed the segment yet (a new
process loading a thread) and wants many of its objects, or a record segment
(whose windows cover all of it anyway), reads it in one call instead, indexes it
from memory and takes the objects from the same bytes.
"""
WHOLE_READ_NAMES = 8
"""Objects wanted from a blob segment at or above which a cold reader reads it whole."""
_SECTOR = 512  # the unit a device persists whole (or not at all) on power loss


def _numbered(version: int) -> str:
    return _segment_name(version // RECORDS_PER_SEGMENT)


@functools.lru_cache(maxsize=1024)
def _segment_name(number: int) -> str:
    # Cached: reading a log's records names the same segment for each of them.
    return f"{SEGMENT_PREFIX}{layout.version_name(number)}"


def reserve_for(frames_end: int, cap: int = RESERVE, least: int = MIN_RESERVE) -> int:
    """Zero bytes to extend a record segment by after frames ending at ``frames_end``.

    A sixteenth of the frames, at least ``least`` and at most ``cap``: a small
    thread carries a few KiB of zeros, not ``cap``; a growing one extends its file
    once per sixteenth of growth, then every ``cap`` bytes once it reaches ``cap *
    16``. Extending costs a commit of the file size with the sync, which the writes
    that fit in the reserve are spared.
    """
    if cap <= 0:
        return 0
    return min(cap, max(least, frames_end // RESERVE_SHARE))


@functools.lru_cache(maxsize=4096)
def segment_of(name: str) -> str | None:
    """The segment file holding the object ``name``, or None for a plain file."""
    # Cached: record names are the same in every thread ("...0042.rec"), so a
    # process reading many threads' records asks for the same few thousand.
    match = _RECORD.match(name)
    if match is not None:
        return _numbered(int(match.group(1)))
    if name.endswith(layout.RECORD_SUFFIX):
        return f"{SEGMENT_PREFIX}other"
    if _BLOB.match(name) is not None:
        return f"{SEGMENT_PREFIX}blobs"
    return None


def is_segment(name: str) -> bool:
    """Whether a file name is a segment file."""
    return _SEGMENT.match(name) is not None


def first_segment_after(name: str) -> str | None:
    """The lowest segment that can hold names greater than ``name`` (for listing)."""
    match = _RECORD.match(name)
    if match is None:
        return None
    return _numbered(int(match.group(1)))


def _etag(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def frame(kind: int, name: str, data: bytes) -> bytes:
    """Encode one frame."""
    raw = name.encode("utf-8")
    head = _HEAD.pack(_MAGIC, kind, len(raw), len(data)) + raw
    return b"".join((head, _CRC.pack(crc32(head)), data, _CRC.pack(crc32(data))))


_ID_FRAME_SIZE = _HEAD.size + 4 + 16 + 4


class _Index(msgspec.Struct):
    """What a scan of one segment file found."""

    ino: int = -1
    file_id: bytes | None = None  # from the segment's first frame
    end: int = 0  # just past the last valid frame
    # name -> (data offset, data length)
    live: dict[str, tuple[int, int]] = msgspec.field(default_factory=dict)
    size: int = 0  # the file's size when last looked at (frames plus reserve)
    torn: int = 0  # bytes after ``end`` that belong to no valid frame
    # Last frames whose header had one flipped bit, read with it put back (their
    # data checksum holds): name -> the frame's offset. Verify reports them.
    repaired: dict[str, int] = msgspec.field(default_factory=dict)
    # Whether this process made the file's directory entry durable: a segment
    # created by a writer that crashed before acknowledging may not be.
    dir_synced: bool = False


class _Segment:
    """One segment file: its index, refreshed by scanning what was appended."""

    def __init__(
        self,
        path: str,
        fsync: bool,
        *,
        reserve: int = 0,
        least: int = MIN_RESERVE,
        on_open: Callable[[_Segment], None] | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        self.path = path
        self.fsync = fsync
        self.lock_timeout = lock_timeout
        self.reserve = reserve  # the most zero bytes to extend the file by (0: none)
        self.least = least  # the fewest (see MIN_RESERVE)
        self.index = _Index()
        self.lock = threading.Lock()  # flock does not exclude threads of a process
        # The writers' descriptor, kept open between writes (see ``locked``).
        self.fd: int | None = None
        self._fd_ino = -1
        self._on_open = on_open

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit, say
            self.drop_fd()

    def drop_fd(self) -> None:
        """Close the writers' descriptor (the caller holds the lock, or is alone)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def trim_and_close(self) -> None:
        """:meth:`trim_reserve`, then close the descriptor (the caller holds ``lock``).

        A segment whose descriptor was closed already is opened for the cut; a
        file gone meanwhile has nothing to cut.
        """
        if self.fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR)
            except FileNotFoundError:
                return
            self.fd, self._fd_ino = fd, fd_status(fd).st_ino
        try:
            self.trim_reserve()
        finally:
            self.drop_fd()

    def _scan(self, fd: int, size: int, contents: _Buffer | None = None) -> None:
        # Reads the new part of the file a window at a time and jumps over the data
        # of frames larger than a small window: indexing a segment of large blobs
        # reads their headers, not their bytes. ``contents``: the whole file, read
        # by the caller (a fresh index only), scanned from memory.
        index = self.index
        index.size = size
        if size <= index.end:
            index.torn = 0
            return
        fresh = index.end == 0
        # Bytes this process knows it could not clear (see ``_unwrite``).
        suspect = index.torn
        at_reserve = False
        buf: _Buffer = b""  # the file from offset base
        base, pos = index.end, 0
        window, whole = _WINDOW, False  # whole: buf runs to the end of the file
        if contents is not None and fresh and len(contents) == size:
            buf, whole = contents, True
        valid_end = base
        while base + pos < size:
            if buf:
                pos, last = _plain_frames(buf, pos, base, index.live)
                if last >= 0:
                    valid_end = base + pos
                    window = _SMALL_WINDOW if last > _SMALL_WINDOW else _WINDOW
            parsed = _parse(buf, pos, size - base)
            if parsed == _NEED or (parsed is None and not whole):
                # Read on from this frame: a window for its header, or the whole
                # rest after a bad header (it must be searched for the next frame)
                # or when a window read right here was too small for the header.
                grown = pos == 0 and bool(buf)
                base, pos = base + pos, 0
                whole = parsed is None or grown or size - base <= window
                buf = pread_buffer(fd, size - base if whole else window, base)
                continue
            if parsed == _SHORT or parsed is None:
                if parsed is None and self._word(fd, buf, base, pos, size) == (
                    _ZERO_WORD
                ):
                    at_reserve = True  # the end of the frames
                    break
                # A bad header: skip to the next valid frame if there is one (what
                # lies between is corruption, not a torn tail).
                nxt = None if parsed == _SHORT else _resync(buf, pos + 1)
                if nxt is not None:
                    pos = nxt
                    continue
                # The last frame looks torn (or, _SHORT, is being written: never
                # look inside it then). One flipped bit in its header makes an
                # acknowledged frame look so: read it if putting the bit back
                # makes the header and the data check out.
                repaired = self._repaired_last(fd, base + pos, size)
                if repaired is None:
                    break
                name, data_at, length, frame_end = repaired
                index.live[name] = (data_at, length)
                index.repaired[name] = base + pos
                valid_end = frame_end
                base, pos, buf, whole = frame_end, 0, b"", False
                continue
            assert not isinstance(parsed, str)  # noqa: S101 - narrowed above
            kind, name, data_at, length, end = parsed
            if (
                base + end < size
                and self._word(fd, buf, base, end, size) == _ZERO_WORD
                and self._torn_into_reserve(fd, buf, base, pos, end)
            ):
                break
            if kind == _PUT:
                index.live[name] = (base + data_at, length)
            elif kind == _TOMBSTONE:
                index.live.pop(name, None)
            elif base + data_at == _ID_FRAME_SIZE - 4 - 16:
                if data_at + length > len(buf):
                    base, pos, buf = base + pos, 0, b""  # re-read it whole
                    continue
                index.file_id = bytes(buf[data_at : data_at + length])
            pos = end
            valid_end = base + pos
            window = _SMALL_WINDOW if length > _SMALL_WINDOW else _WINDOW
        index.end = valid_end
        # Between two scans by one process only a writer killed mid-write can leave
        # bytes in the reserve, and those start at the end of the frames; a new
        # index (a new process, after a power loss too) looks through all of it, as
        # does one whose failed append's bytes could not all be cleared.
        index.torn = (
            0
            if at_reserve and not fresh and not suspect
            else _nonzero_extent(fd, valid_end, size)
        )

    @staticmethod
    def _repaired_last(
        fd: int, start: int, size: int
    ) -> tuple[str, int, int, int] | None:
        """The frame at ``start`` read with one flipped header bit put back.

        Only when nothing valid follows it (the caller checked) and
        :func:`inspect_cut` recovers its data whole from bytes that are all in
        the file. Returns (name, data offset, data length, frame end) as file
        offsets, or None.
        """
        extent = _nonzero_extent(fd, start, size)
        if extent < _HEAD.size + 4:
            return None
        cut = inspect_cut(pread(fd, extent, start))
        if cut.torn or cut.name is None or cut.data is None:
            return None
        data_at = start + _HEAD.size + len(cut.name.encode()) + 4
        end = data_at + len(cut.data) + 4
        if end > size:
            return None  # its last bytes are not in the file: not readable here
        return cut.name, data_at, len(cut.data), end

    @staticmethod
    def _word(fd: int, buf: _Buffer, base: int, pos: int, size: int) -> _Buffer:
        """The 4 bytes at file offset ``base + pos`` (fewer at the end of the file)."""
        if pos + 4 <= len(buf):
            return buf[pos : pos + 4]
        return pread(fd, min(4, size - base - pos), base + pos)

    @staticmethod
    def _torn_into_reserve(
        fd: int, buf: _Buffer, base: int, pos: int, end: int
    ) -> bool:
        """Whether the frame at ``pos``, followed by the reserve, is a torn write.

        A frame written into the reserve whose bytes did not all reach the disk
        (its writer killed mid-write, or power lost before its ``fdatasync``)
        keeps zeros where it was not written: a sector's worth, or the frame's
        share of its first or last sector. Such a frame failing its data checksum
        was never acknowledged. A checksum failure without zeros is damage to an
        acknowledged frame, kept and reported like any other.
        """
        raw = buf[pos:end] if end <= len(buf) else pread(fd, end - pos, base + pos)
        data = memoryview(raw)[: len(raw) - 4]
        head_len = _HEAD.size + int.from_bytes(raw[5:7], "big") + 4
        (crc,) = _CRC.unpack_from(raw, len(raw) - 4)
        if crc32(data[head_len:]) == crc:
            return False
        start = base + pos
        cut = start
        while cut < start + len(raw):
            nxt = min((cut // _SECTOR + 1) * _SECTOR, start + len(raw))
            if not any(raw[cut - start : nxt - start]):
                return True
            cut = nxt
        return False

    def refresh(
        self,
        fd: int,
        *,
        shared: bool = False,
        st: FileStatus | None = None,
        whole: bool = False,
    ) -> _Buffer | None:
        """Bring the index up to date with the file open as ``fd``.

        The index belongs to one file: a new inode, a file shorter than what was
        indexed, or another file id in the first frame (inode numbers are reused
        after an emptied segment is unlinked and created again) starts it over.

        Args:
            fd: The segment, open.
            shared: Take a shared ``flock`` for the scan (readers; a writer holds
                the exclusive one already). A writer fills the reserve in place, so
                a reader without the lock could see a frame's header before its
                data.
            st: The file's status, if the caller has it.
            whole: With ``shared``, and no index of the file yet: read the file in
                one call (up to :data:`WHOLE_READ_MAX`) and index it from memory.

        Returns:
            The file's bytes when ``whole`` read them, else None. Frames never
            change once indexed, so they hold every indexed object's bytes.
        """
        if st is None:
            found = os.fstat(fd)  # a reader's: see stores._statx
            st = FileStatus(found.st_ino, found.st_size)
        index = self.index
        if st.st_ino != index.ino or st.st_size < index.end:
            index = self.index = _Index(ino=st.st_ino)
        elif index.file_id is not None:
            head = pread(fd, _ID_FRAME_SIZE, 0)
            if head[_ID_FRAME_SIZE - 4 - 16 : _ID_FRAME_SIZE - 4] != index.file_id:
                index = self.index = _Index(ino=st.st_ino)
        if (
            index.end
            and st.st_size == index.size
            and (st.st_size == index.end or pread(fd, 4, index.end) == _ZERO_WORD)
        ):
            return None  # nothing was written since the last scan
        if not shared:
            self._scan(fd, st.st_size)
            return None
        flock_within(fd, self.path, shared=True, timeout=self.lock_timeout)
        try:
            size = os.lseek(fd, 0, os.SEEK_END)  # all reads are positioned
            contents = None
            if whole and index.end == 0 and 0 < size <= WHOLE_READ_MAX:
                contents = pread_buffer(fd, size, 0)
            self._scan(fd, size, contents)
            return contents
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def locked(self, create: bool) -> Iterator[int | None]:
        """Flock the segment file for writing; yields None if it does not exist.

        The context manager form of :meth:`lock_for_write` and
        :meth:`unlock_after_write`.
        """
        fd = self.lock_for_write(create)
        try:
            yield fd
        finally:
            self.unlock_after_write(fd)

    def lock_for_write(self, create: bool) -> int | None:
        """Take the segment's locks for writing: its descriptor, None if no file.

        The thread lock is held on return either way, and the ``flock`` too when a
        descriptor is returned; :meth:`unlock_after_write` lets go of them (from
        any thread). The descriptor stays open between writes (a commit then costs
        no open or close), and is checked against the path after locking: a
        segment emptied and unlinked meanwhile, perhaps created again, is opened
        anew.

        In no-wait mode (a write tried on the event loop) the thread lock and the
        flock are only tried: :class:`~stores._nowait.WouldBlock` before anything
        is written, with nothing held.
        """
        lock = self.lock
        acquire(lock)
        try:
            while True:
                fd = self.fd
                if fd is None:
                    # Not O_APPEND: frames are written at the end of the last one,
                    # which lies inside the reserve.
                    flags = os.O_RDWR | (os.O_CREAT if create else 0)
                    try:
                        fd = os.open(self.path, flags, 0o644)
                    except FileNotFoundError:
                        return None
                    self.fd, self._fd_ino = fd, fd_status(fd).st_ino
                    if self._on_open is not None:
                        self._on_open(self)
                flock_within(fd, self.path, timeout=self.lock_timeout)
                try:
                    # Not os.stat: it would mark the file's times as read, and
                    # make the write below update them (see stores._statx).
                    st: FileStatus | None = path_status(self.path)
                except FileNotFoundError:
                    st = None
                except BaseException:
                    self.unlock_after_write(fd, keep_lock=True)
                    raise
                if st is None or st.st_ino != self._fd_ino:
                    self.drop_fd()  # unlinked (emptied), perhaps created again
                    continue
                try:
                    # The file id is read even so: a file rewritten in place (a
                    # backup copied over it) keeps its inode.
                    self.refresh(fd, st=st)
                except BaseException:
                    self.unlock_after_write(fd, keep_lock=True)
                    raise
                return fd
        except BaseException:
            lock.release()
            raise

    def unlock_after_write(self, fd: int | None, *, keep_lock: bool = False) -> None:
        """Let go of what :meth:`lock_for_write` took (``fd``: what it returned).

        ``keep_lock`` lets go of the ``flock`` alone.
        """
        try:
            # Not if the descriptor was closed meanwhile (an unlink): its number
            # may name another file by now.
            if fd is not None and self.fd == fd:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            if not keep_lock:
                self.lock.release()

    def append(self, fd: int, kind: int, name: str, data: bytes) -> bool:
        """Append one frame (the caller holds the lock) and make it durable.

        Returns:
            Whether this append started the file (its name must then be synced).
        """
        return self.append_frames(fd, [(kind, name, data)])

    def append_frames(
        self, fd: int, items: Sequence[tuple[int, str, bytes]], *, sync: bool = True
    ) -> bool:
        """Append ``(kind, name, data)`` frames in one write and one sync.

        The caller holds the lock. Returns whether this append started the file.
        ``sync=False`` leaves the frames to the next sync of the file (derived
        objects: see :meth:`SegmentSet.create_many`).
        """
        started, commit, undo = self.write_frames(fd, items)
        if self.fsync and sync:
            try:
                os.fdatasync(fd)
            except BaseException:
                undo()
                raise
        commit()
        return started

    def write_frames(
        self, fd: int, items: Sequence[tuple[int, str, bytes]]
    ) -> tuple[bool, Callable[[], None], Callable[[], None]]:
        """Write ``(kind, name, data)`` frames in one write, not yet synced or indexed.

        The caller holds the lock, and keeps it until it has synced the file (if it
        syncs) and called the first function returned, which indexes the frames.
        After a failed sync it calls the second instead, which overwrites the
        frames with zeros: after a failed ``fdatasync`` Linux may mark the pages it
        could not write clean, so a later sync would succeed without them, and
        frames left looking whole would be indexed by the next scan (served to
        readers, adopted by a retry, built on by the next append). A write that
        fails partway is undone the same way before this raises.

        Returns:
            Whether this write started the file (its name must then be synced),
            the function that indexes the frames, and the one that undoes them.
        """
        index = self.index
        if index.torn and active():
            # A repair is left to a worker thread: it writes a quarantine file and
            # clears the tail, and an attempt must change nothing before it gives up.
            raise WouldBlock("a torn tail to repair first")
        if index.torn:
            # An incomplete frame left by a crashed writer, or an acknowledged one
            # whose header rotted: kept aside, then overwritten with zeros, which
            # end the frames as the reserve's do (the new frames go over them).
            # Not cut with ftruncate: the file keeps its blocks, and LazyFS (the
            # power-loss tests' file system) empties a file it has not cached when
            # asked to truncate it.
            self._quarantine(fd, index.end, index.torn)
            _write_at(fd, bytes(index.torn), index.end)
            index.torn = 0
        started = index.end == 0
        head = b""
        file_id = None
        if started:
            # Every segment starts with a random id, so that an index of an unlinked
            # file is never taken for one of a new file that got its inode number.
            file_id = os.urandom(16)
            head = frame(_FILE_ID, "", file_id)
        frames = [frame(kind, name, data) for kind, name, data in items]
        payload = head + b"".join(frames)
        start, size, length = index.end, index.size, len(payload)
        if index.size - index.end < len(payload):
            # Extend the file past the frames by a reserve of zeros, synced with
            # them: the next appends overwrite blocks already allocated and
            # written, so their fdatasync has no file size to commit. The reserve
            # grows with the segment, so that a small one carries few zeros.
            reserve = reserve_for(index.end + len(payload), self.reserve, self.least)
            index.size = index.end + len(payload) + reserve
            payload += bytes(reserve)

        def undo() -> None:
            self._unwrite(fd, start, length, size)

        try:
            _write_at(fd, payload, start)
        except BaseException:
            undo()
            raise

        def commit() -> None:
            if file_id is not None:
                index.file_id = file_id
            pos = index.end + len(head)
            for (kind, name, data), framed in zip(items, frames, strict=True):
                if kind == _PUT:
                    index.live[name] = (pos + len(framed) - 4 - len(data), len(data))
                else:
                    index.live.pop(name, None)
                pos += len(framed)
            index.end = pos

        return started, commit, undo

    def _unwrite(self, fd: int, start: int, length: int, size: int) -> None:
        """Zero the ``length`` bytes a failed append wrote at ``start`` (locks held).

        Zeros end the frames, as the reserve's do, so no scan (this process's or
        another's) takes them for a frame, and the next append writes over them.
        The first word goes first, alone: it is what a scan stops at. Should even
        that fail (a file system refusing every write), the bytes stay, and the
        append's outcome is unknown, as after a crash inside it. Should only the
        rest fail, the bytes behind the zero word are left as a torn tail: this
        process's index would otherwise take them for reserve, the next frame
        would go over the zero word, and a later frame of the failed append, whole
        behind it, would be found by the next scan. The next append quarantines
        and clears them first, as any writer does a torn tail.
        """
        self.index.size = size
        try:
            _write_at(fd, _ZERO_WORD, start)
        except OSError:
            return
        try:
            _write_at(fd, bytes(length - len(_ZERO_WORD)), start + len(_ZERO_WORD))
        except OSError:
            self.index.torn = max(self.index.torn, length)

    def trim_reserve(self) -> None:
        """Cut the reserve's zeros off the end of the file (the caller holds ``lock``).

        Only under the exclusive ``flock``, taken without waiting (a writer holding
        it keeps the reserve it is writing into), and only bytes that are all zeros
        after the last valid frame: a torn tail is left for the next writer to
        quarantine. Not synced: a truncation lost in a power loss brings back
        zeros that were synced before, and zeros end the frames either way.
        """
        fd = self.fd
        if fd is None or not self.reserve:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        try:
            st = path_status(self.path)
            if st.st_ino != self._fd_ino:
                return  # unlinked meanwhile, perhaps created again
            self.refresh(fd, st=st)
            index = self.index
            if (
                index.torn == 0
                and index.size > index.end
                and _nonzero_extent(fd, index.end, index.size) == 0
            ):
                os.ftruncate(fd, index.end)
                index.size = index.end
        except FileNotFoundError:
            return
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _quarantine(self, fd: int, offset: int, length: int) -> None:
        """Copy the ``length`` bytes at ``offset`` to a quarantine file, durably.

        Called before they are truncated: the file and its directory entry are
        synced first (whatever the store's ``fsync``: this is rare, and the bytes
        may be the only copy of an acknowledged record).
        """
        data = pread(fd, length, offset)
        if not any(data) or inspect_cut(data).torn:
            return  # zeros, or a write provably never acknowledged: nothing to keep
        directory, segment = os.path.split(self.path)
        write_temp(
            directory,
            data,
            fsync=True,
            prefix=f"{QUARANTINE_PREFIX}{segment}-{offset}-",
        )
        fsync_dir(directory)

    @contextlib.contextmanager
    def reading(self) -> Iterator[int | None]:
        """Open the segment read-only, its index brought up to date.

        Yields None if the segment does not exist. New frames are indexed under the
        shared lock (see :meth:`refresh`).
        """
        with self.reading_whole(False) as (fd, _):
            yield fd

    def worth_reading_whole(self, wanted: int) -> bool:
        """Whether a cold reader of ``wanted`` objects reads this file whole.

        A record segment: indexing reads all of it anyway, a window at a time.
        Another: when :data:`WHOLE_READ_NAMES` objects or more are wanted.
        """
        return self.reserve > 0 or wanted >= WHOLE_READ_NAMES

    @contextlib.contextmanager
    def reading_whole(self, whole: bool) -> Iterator[tuple[int | None, _Buffer | None]]:
        """:meth:`reading`, also yielding the file's bytes if indexing read them.

        ``whole``: read the file in one call if it has no index yet (see
        :meth:`refresh`); the bytes yielded are then the file's, else None.
        """
        with held(self.lock):
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                yield None, None
                return
            try:
                contents = self.refresh(fd, shared=True, whole=whole)
                yield fd, contents
            finally:
                os.close(fd)

    def read(self, name: str) -> bytes | None:
        """The object's bytes, or None."""
        with self.reading_whole(self.worth_reading_whole(1)) as (fd, contents):
            found = None if fd is None else self.index.live.get(name)
            if fd is None or found is None:
                return None
            if contents is not None:
                return bytes(memoryview(contents)[found[0] : found[0] + found[1]])
            return pread(fd, found[1], found[0])

    def names(self) -> list[str]:
        """The live names (refreshed)."""
        with self.reading() as fd:
            return [] if fd is None else list(self.index.live)


def _join(directory: str, name: str) -> str:
    """``os.path.join(directory, name)`` for a plain name, without its checks."""
    return f"{directory}/{name}" if directory[-1:] != "/" else directory + name


def _plain_file_exists(directory: str, name: str) -> bool:
    """Whether ``name`` is a plain file in ``directory``: taken, as a frame is.

    A log written file per record (``segments=False``) keeps such files.

    ``access``, not ``os.path.exists``: that raises and catches an exception when,
    as nearly always, there is no such file, and creates run it on the event loop
    for every durable append.
    """
    return os.access(_join(directory, name), os.F_OK)


_first = operator.itemgetter(0)
_second = operator.itemgetter(1)


@functools.lru_cache(maxsize=256)
def _name_and_crc(name_len: int) -> Callable[[_Buffer, int], tuple[bytes, int]]:
    """Unpacks a frame's name and header checksum, which follow its fixed header."""
    return cast(
        "Callable[[_Buffer, int], tuple[bytes, int]]",
        struct.Struct(f">{name_len}sI").unpack_from,
    )


def _plain_frames(
    buf: _Buffer, pos: int, base: int, live: dict[str, tuple[int, int]]
) -> tuple[int, int]:
    """Index the run of ordinary frames at ``pos``: the scan's fast path.

    An ordinary frame is a put or a tombstone whose header checks out, lying
    wholly in ``buf`` with the next frame's first word after it, which is not
    zeros. Such a frame is indexed as :meth:`_Segment._scan` would index it, with
    none of the questions a tear or damage raises; the run stops short of the
    first frame that is anything else, for the scan's general path to judge.
    Indexing a segment of small records then takes about 0.7 of the time it
    took (``_parse`` is general: windows, short and torn frames).

    Returns:
        Where the run stopped, and the data length of its last frame (-1 when it
        indexed none).
    """
    unpack, checksum, name_and_crc = _HEAD.unpack_from, crc32, _name_and_crc
    head_size = _HEAD.size
    view = memoryview(buf)
    size = len(buf)
    last = -1
    if size - pos < head_size:
        return pos, last
    head = unpack(buf, pos)
    while True:
        magic, kind, name_len, data_len = head
        head_end = pos + head_size + name_len
        end = head_end + 8 + data_len
        if magic != _MAGIC or end + 4 > size or (kind != _PUT and kind != _TOMBSTONE):
            break
        raw_name, head_crc = name_and_crc(name_len)(buf, pos + head_size)
        if checksum(view[pos:head_end]) != head_crc:
            break
        # The word after the frame must not be zeros: it is the next frame's
        # magic, whose header is unpacked here once for both (0.8x the time of a
        # scan that sliced each word out to compare it).
        more = size - end >= head_size
        if more:
            head = unpack(buf, end)
            if head[0] == _ZERO_WORD:
                break
        elif buf[end : end + 4] == _ZERO_WORD:
            break
        try:
            name = raw_name.decode("utf-8")
        except UnicodeDecodeError:
            break
        if kind == _PUT:
            live[name] = (base + head_end + 4, data_len)
        else:
            live.pop(name, None)
        pos, last = end, data_len
        if not more:
            break
    return pos, last


def _parse(
    buf: _Buffer, pos: int, available: int | None = None
) -> tuple[int, str, int, int, int] | str | None:
    """Parse the frame at ``pos``.

    Args:
        buf: Bytes of the file.
        pos: Where the frame starts in ``buf``.
        available: How many bytes the file holds from the start of ``buf`` (more
            than ``buf`` when it is a window); the frame's data need not be in
            ``buf``, only its header.

    Returns:
        (kind, name, data offset, data length, end); ``_SHORT`` when the file ends
        before the frame does (a torn or in-progress append); ``_NEED`` when the
        header lies past the end of ``buf`` but not of the file; None for a bad
        header.
    """
    limit = len(buf) if available is None else available
    if limit - pos < _HEAD.size:
        return _SHORT
    if len(buf) - pos < _HEAD.size:
        return _NEED
    magic, kind, name_len, data_len = _HEAD.unpack_from(buf, pos)
    if magic != _MAGIC or kind not in (_PUT, _TOMBSTONE, _FILE_ID):
        return None
    head_end = pos + _HEAD.size + name_len
    if limit < head_end + 4:
        return _SHORT
    if len(buf) < head_end + 4:
        return _NEED
    (head_crc,) = _CRC.unpack_from(buf, head_end)
    if crc32(memoryview(buf)[pos:head_end]) != head_crc:
        return None
    data_at = head_end + 4
    end = data_at + data_len + 4
    if limit < end:
        return _SHORT
    try:
        name = buf[pos + _HEAD.size : head_end].decode("utf-8")
    except UnicodeDecodeError:
        return None
    # A data checksum failure is corruption, not a tear: the frame stays, and its
    # bytes are served so that the record's own checksum names the damage.
    return kind, name, data_at, data_len, end


class CutTail(msgspec.Struct, frozen=True):
    """What the bytes of a quarantine file are (see :func:`inspect_cut`).

    Attributes:
        name: The name of the object their frame holds, when its header could be
            read (as stored, or with one flipped bit put back).
        data: The object's bytes, when the frame is whole and its data checksum
            holds; None otherwise.
        torn: Whether they are provably a write that was never acknowledged.
        detail: What was found, readable.
    """

    name: str | None
    data: bytes | None
    torn: bool
    detail: str


class SegmentTail(msgspec.Struct, frozen=True):
    """A segment's end as :meth:`SegmentSet.inspect_tail` found it.

    Attributes:
        end: Where its valid frames end.
        torn: Bytes after ``end`` that belong to no valid frame (0: none).
        cut: What those bytes are, when there are any (see :func:`inspect_cut`).
        repaired: Last frames read with one flipped header bit put back: name ->
            the frame's offset.
    """

    end: int
    torn: int
    cut: CutTail | None
    repaired: dict[str, int]


_MAX_PAD = 16 * 1024 * 1024  # zeros a whole frame may end in (see inspect_cut)
# An acknowledged frame ends in its data's CRC-32 (and a record in its own): that
# its last 8 bytes are all zeros has odds of 2**-64, a write stopped short of them
# (on a page boundary, the reserve's zeros after it) is what a killed writer leaves.
_TORN_SHORTFALL = 8


def _header_at(buf: bytes | bytearray) -> tuple[int, int, int] | None:
    """(kind, name length, data length) of the frame at 0 if its header checks out."""
    if len(buf) < _HEAD.size:
        return None
    magic, kind, name_len, data_len = _HEAD.unpack_from(buf, 0)
    head_end = _HEAD.size + name_len
    if magic != _MAGIC or kind not in (_PUT, _TOMBSTONE) or len(buf) < head_end + 4:
        return None
    (crc,) = _CRC.unpack_from(buf, head_end)
    if crc32(memoryview(buf)[:head_end]) != crc:
        return None
    return kind, name_len, data_len


def _repaired_header(raw: bytes) -> tuple[bytearray, int] | None:
    """The header with one flipped bit put back, and the byte it was in, if any."""
    if len(raw) < _HEAD.size + 4:
        return None
    stated = int.from_bytes(raw[5:7], "big")
    span = min(len(raw), _HEAD.size + stated + 4, _HEAD.size + 0xFFFF + 4)
    # The name length itself may be the flipped field: any header the frame can
    # have fits in the first 11 + 65535 + 4 bytes.
    buf = bytearray(raw[: _HEAD.size + 0xFFFF + 4])
    for i in range(span):
        for bit in range(8):
            buf[i] ^= 1 << bit
            if _header_at(buf) is not None:
                return buf, i
            buf[i] ^= 1 << bit
    return None


def inspect_cut(raw: bytes) -> CutTail:
    """Classify the bytes cut from a segment's torn-looking tail.

    ``raw`` runs from where the valid frames ended to the last non-zero byte of
    the file (the reserve's zeros are not kept). The rules:

    * the first frame's header checks out and the frame runs more than 8 bytes
      past ``raw``: the write stopped before its end (a killed writer's copy ends
      on a page, and the zeros after it are the reserve's; or the file ends
      inside it). Never acknowledged: ``torn``, and the writer keeps no copy;
    * the header fails its checksum, but putting one flipped bit back makes it
      check out, and the frame (its last bytes may be zeros) passes its data
      checksum: an acknowledged frame whose header rotted. Its data is returned;
    * anything else (several bad bits, a frame whose data fails too) cannot be
      told from damage to an acknowledged frame, and is not ``torn``; except bytes
      too few to hold a frame's header and checksum at all.
    """
    if len(raw) < _HEAD.size + 4:
        return CutTail(None, None, True, f"{len(raw)} bytes, less than a header")
    head = _header_at(raw)
    repaired_at: int | None = None
    buf: bytes | bytearray = raw
    if head is None:
        repaired = _repaired_header(raw)
        if repaired is None:
            return CutTail(
                None,
                None,
                False,
                f"{len(raw)} bytes whose frame header fails its checksum "
                "(beyond one flipped bit)",
            )
        buf, repaired_at = repaired
        head = _header_at(buf)
        assert head is not None  # noqa: S101 - checked by _repaired_header
    kind, name_len, data_len = head
    try:
        name: str | None = bytes(buf[_HEAD.size : _HEAD.size + name_len]).decode()
    except UnicodeDecodeError:
        name = None
    data_at = _HEAD.size + name_len + 4
    end = data_at + data_len + 4
    what = "a tombstone" if kind == _TOMBSTONE else "a frame"
    if repaired_at is None:
        if end - len(raw) > _TORN_SHORTFALL:
            return CutTail(
                name,
                None,
                True,
                f"{what} whose bytes stop {end - len(raw)} short of its end "
                "(an interrupted write)",
            )
        # Its last few bytes may have been zeros (the cut ends at a non-zero one).
        whole = bytes(raw[:end]) + bytes(max(0, end - len(raw)))
        data = whole[data_at : data_at + data_len]
        if crc32(data) == _CRC.unpack_from(whole, end - 4)[0]:
            return CutTail(name, data, False, f"{what} whose checksums hold")
        short = f", {end - len(raw)} bytes short" if end > len(raw) else ""
        return CutTail(name, None, False, f"{what} whose data checksum fails{short}")
    if end - len(raw) > _MAX_PAD:
        return CutTail(
            name, None, False, f"{what} whose header fails its checksum, cut short"
        )
    # The cut kept the bytes up to the last non-zero one: the frame's last bytes
    # may have been zeros.
    whole = bytes(raw[:end]) + bytes(max(0, end - len(raw)))
    data = whole[data_at : data_at + data_len]
    bad_bit = f"its header checksum fails (one flipped bit, in byte {repaired_at})"
    if crc32(data) != _CRC.unpack_from(whole, end - 4)[0]:
        return CutTail(name, None, False, f"{bad_bit}, and so does its data's")
    return CutTail(
        name,
        data if kind == _PUT else None,
        False,
        f"{bad_bit}; its data checksum holds",
    )


_ALL_SETS: weakref.WeakSet[SegmentSet] = weakref.WeakSet()


def _weak(method: Callable[[_Segment], None]) -> Callable[[_Segment], None]:
    # Segments call back their set without keeping it alive: a dropped store's
    # descriptors close when it goes, not at the next garbage collection.
    ref = weakref.WeakMethod(method)

    def call(segment: _Segment) -> None:
        target = ref()
        if target is not None:
            target(segment)

    return call


def _after_fork() -> None:
    for segments in list(_ALL_SETS):
        segments._forget_fds()


os.register_at_fork(after_in_child=_after_fork)


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _nonzero_extent(fd: int, start: int, size: int) -> int:
    """Bytes from ``start`` to the end of the file without its reserve (0: none).

    A file that ends in fewer than 4 zero bytes has no reserve: its zeros are part of
    what was written (a torn header's length field, say).
    """
    if size - start < 4 or pread(fd, 4, size - 4) != _ZERO_WORD:
        return size - start
    end = size
    while end > start:
        lo = max(start, end - _WINDOW)
        chunk = pread(fd, end - lo, lo).rstrip(b"\0")
        if chunk:
            return lo + len(chunk) - start
        end = lo
    return 0


def _resync(buf: _Buffer, pos: int) -> int | None:
    while True:
        pos = buf.find(_MAGIC, pos)
        if pos < 0:
            return None
        parsed = _parse(buf, pos)
        if parsed is not None and parsed != _SHORT:
            return pos
        pos += 1


class PendingCreate:
    """A frame written under its segment's locks, its sync still to come.

    Made by :meth:`SegmentSet.create_unsynced`. :meth:`finish` syncs the file, then
    indexes the frame and lets go of the locks, so that no reader indexes the frame
    before it is durable, as with :meth:`SegmentSet.create`. The locks are a
    ``threading.Lock`` and an ``flock``, both of which another thread may release.
    """

    def __init__(
        self,
        fd: int | None,
        written: tuple[Callable[[], None], Callable[[], None]],
        segment: _Segment,
        locked_fd: int,
        sync_dir: str | None,
        index: _Index,
        etag: str,
    ) -> None:
        self._fd = fd
        self._commit, self._undo = written
        self._segment = segment
        self._locked_fd = locked_fd
        self._sync_dir = sync_dir
        self._index = index
        self.etag = etag

    def finish(self) -> str:
        """Sync the frame (when the store syncs), index it, release the locks.

        Returns:
            The object's etag.

        Raises:
            OSError: The sync of the file or of its directory failed. The frame
                is overwritten with zeros (see :meth:`_Segment.write_frames`) and
                the locks are let go of.
        """
        try:
            if self._fd is not None:
                os.fdatasync(self._fd)
            if self._sync_dir is not None and not self._index.dir_synced:
                # The segment's directory entry must be durable before the frame
                # is indexed: its creator may have crashed before syncing it.
                fsync_dir(self._sync_dir)
                self._index.dir_synced = True
            self._commit()
        except BaseException:
            self._undo()
            raise
        finally:
            self._segment.unlock_after_write(self._locked_fd)
        return self.etag

    @property
    def sync_fd(self) -> int | None:
        """The descriptor whose ``fdatasync`` is all that is left, if that is all.

        None when the store does not sync, or when the segment's directory must be
        synced too (its first append): :meth:`finish` then does everything.
        """
        if self._sync_dir is not None and not self._index.dir_synced:
            return None
        return self._fd

    def finish_synced(self, error: OSError | None) -> str:
        """:meth:`finish`, after ``fdatasync(sync_fd)`` ran elsewhere (the kernel).

        Args:
            error: The sync's error, None if it succeeded.

        Returns:
            The object's etag.

        Raises:
            OSError: ``error``, once the frame is undone and the locks let go of,
                as after a failed sync in :meth:`finish`.
        """
        try:
            if error is not None:
                self._undo()
                raise error
            self._commit()
        finally:
            self._segment.unlock_after_write(self._locked_fd)
        return self.etag


class SegmentSet:
    """The segments of one store, by path; thread-safe.

    At most :data:`MAX_OPEN` segments keep their writers' descriptor open; opening
    one more closes the one opened longest ago (unless it is in use right now).
    """

    def __init__(self, fsync: bool, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self.fsync = fsync
        self.lock_timeout = lock_timeout
        self._segments: dict[str, _Segment] = {}
        self._lock = threading.Lock()
        self._open: dict[_Segment, None] = {}  # in the order they were opened
        # Record segments whose descriptor was closed to keep MAX_OPEN, their
        # reserve left for close() to cut (not cut then: the next append to one
        # would have to extend the file again, a sync of its size).
        self._untrimmed: dict[_Segment, None] = {}
        # One callback for all the set's segments: a loader visiting many threads
        # makes a segment object per thread, and each callback is a weak method,
        # its references, a closure and its cell, all tracked by the collector.
        self._on_open = _weak(self._opened)
        _ALL_SETS.add(self)

    def segment(self, path: str) -> _Segment:
        """The segment object for a segment file path.

        Idle segments beyond :data:`CACHED_MAX` are dropped, the least recently
        used first. A thread may still hold one dropped here while another gets a
        new object for the same file: they are then what two processes' objects
        are, each with its own descriptor, and the file's ``flock`` orders them.
        """
        with self._lock:
            segments = self._segments
            # Taken out and put back: the dict's order is the order of last use.
            found = segments.pop(path, None)
            if found is None:
                name = os.path.basename(path)
                numbered = _NUMBERED.match(name) is not None
                found = _Segment(
                    path,
                    self.fsync,
                    reserve=RESERVE if numbered else 0,
                    least=MIN_RESERVE if name == _segment_name(0) else RESERVE,
                    on_open=self._on_open,
                    lock_timeout=self.lock_timeout,
                )
            segments[path] = found
            # Those open or with a reserve to cut are held by the set anyway.
            excess = len(segments) - len(self._open) - len(self._untrimmed)
            if excess > CACHED_MAX:
                self._drop_idle(excess - CACHED_MAX)
            return found

    def _drop_idle(self, excess: int) -> None:
        # Called with ``self._lock`` held. A segment in use stays (dropping it
        # would only cost its index being built twice), moved behind the others
        # so that the next search does not pass it again.
        segments = self._segments
        idle, busy = [], []
        for path, segment in segments.items():
            if (
                segment.fd is None
                and not segment.lock.locked()
                and segment not in self._open
                and segment not in self._untrimmed
            ):
                idle.append(path)
                if len(idle) == excess:
                    break
            else:
                busy.append(path)
        for path in idle:
            del segments[path]
        for path in busy:
            segments[path] = segments.pop(path)

    def _opened(self, segment: _Segment) -> None:
        # Called with ``segment.lock`` held; others' locks are only tried, so two
        # threads opening segments never wait for each other here.
        with self._lock:
            self._open.pop(segment, None)
            self._untrimmed.pop(segment, None)
            self._open[segment] = None
            if len(self._open) <= MAX_OPEN:
                return
            victims = [s for s in self._open if s is not segment]
        for victim in victims[: len(victims) - MAX_OPEN + 1]:
            if victim.lock.acquire(blocking=False):
                try:
                    victim.drop_fd()
                finally:
                    victim.lock.release()
                with self._lock:
                    self._open.pop(victim, None)
                    if victim.reserve:
                        self._untrimmed[victim] = None
                        if len(self._untrimmed) > UNTRIMMED_MAX:
                            del self._untrimmed[next(iter(self._untrimmed))]

    def close(self) -> None:
        """Close the descriptors kept open (reopened if the store is used again).

        Each record segment's reserve is cut off first, when no other writer holds
        its lock: a closed store leaves no zeros behind (the next append extends
        the file again). That includes the segments whose descriptor was closed
        to keep :data:`MAX_OPEN` open, up to the :data:`UNTRIMMED_MAX` closed last
        (each opened again for the cut).
        """
        with self._lock:
            segments = [*self._open, *self._untrimmed]
            self._open, self._untrimmed = {}, {}
        for segment in segments:
            with segment.lock:
                segment.trim_and_close()

    def _forget_fds(self) -> None:
        # In a forked child: the descriptors are the parent's open files, whose
        # flock the child would share instead of being excluded by it.
        # The open ones too: one dropped from the cache may still have a descriptor.
        for segment in {*self._segments.values(), *self._open}:
            fd, segment.fd = segment.fd, None
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        # And the locks: a parent thread inside an append at the fork held its
        # segment's, and no thread of the child will ever let go of it. The child
        # starts with segment objects of its own (indexes rebuilt by scanning).
        self._lock = threading.Lock()
        self._segments = {}
        self._open = {}
        self._untrimmed = {}  # the parent's to cut

    def create(self, directory: str, name: str, data: bytes, *, key: str) -> str:
        """Exclusive create of ``name`` in its segment of ``directory``."""
        return self.create_unsynced(directory, name, data, key=key).finish()

    def create_unsynced(
        self, directory: str, name: str, data: bytes, *, key: str
    ) -> PendingCreate:
        """:meth:`create` up to its sync: the frame written, the locks still held.

        The returned :class:`PendingCreate` must be finished (its sync, which
        releases the locks), in this thread or another: the event loop writes a
        frame in no-wait mode (a few µs for bytes going to the page cache) and
        hands only the ``fdatasync`` to a worker thread.

        Raises:
            ObjectExistsError: ``name`` exists, as a frame or as a plain file.
        """
        seg_name = segment_of(name)
        assert seg_name is not None  # noqa: S101 - callers route only segment names
        # Joined by hand: this runs on the event loop for every durable append.
        segment = self.segment(_join(directory, seg_name))
        fd = segment.lock_for_write(create=True)
        try:
            assert fd is not None  # noqa: S101 - created above
            # A plain file of the same name (a log written file per record) counts.
            if name in segment.index.live or _plain_file_exists(directory, name):
                raise ObjectExistsError(key)
            _, commit, undo = segment.write_frames(fd, [(_PUT, name, data)])
        except BaseException:
            segment.unlock_after_write(fd)
            raise
        index = segment.index
        return PendingCreate(
            fd if self.fsync else None,
            (commit, undo),
            segment,
            fd,
            directory if self.fsync and not index.dir_synced else None,
            index,
            _etag(data),
        )

    def create_many(
        self, directory: str, items: Sequence[tuple[str, bytes]], *, sync: bool = True
    ) -> list[bool]:
        """Create the names not yet present, one write and one sync per segment.

        ``sync=False`` writes without syncing (objects that can be rebuilt, such as
        checkpoint chunks): they become durable with the next sync of their
        segment (any later synced append to it, or :meth:`sync`), and a power cut
        before that may lose them, as it may lose an interrupted write.

        Returns:
            Per item, whether it was created (False: the name existed, as a frame
            or as a plain file, or came earlier in ``items``).
        """
        created = [False] * len(items)
        by_segment: dict[str, list[int]] = {}
        for i, (name, _) in enumerate(items):
            seg_name = segment_of(name)
            assert seg_name is not None  # noqa: S101 - callers route only these
            by_segment.setdefault(seg_name, []).append(i)
        durable = sync and self.fsync
        for seg_name, positions in by_segment.items():
            segment = self.segment(os.path.join(directory, seg_name))
            with segment.locked(create=True) as fd:
                assert fd is not None  # noqa: S101 - created above
                fresh: dict[str, int] = {}
                framed = False  # a name found as a frame, perhaps written unsynced
                for i in positions:
                    name = items[i][0]
                    if name in fresh:
                        continue
                    if name in segment.index.live:
                        framed = True
                    elif not _plain_file_exists(directory, name):
                        fresh[name] = i
                if not fresh:
                    if durable and framed:
                        # Found, not made: it may be a frame written unsynced (a
                        # checkpoint's chunk), which the caller is about to rely on.
                        os.fdatasync(fd)
                        self._sync_dir_once(directory, segment.index)
                    continue
                _, commit, undo = segment.write_frames(
                    fd, [(_PUT, *items[i]) for i in fresh.values()]
                )
                try:
                    if durable:
                        os.fdatasync(fd)
                        # Before the frames are indexed and the locks let go of,
                        # as for a single create: the segment's creator may have
                        # crashed before syncing its directory entry.
                        self._sync_dir_once(directory, segment.index)
                except BaseException:
                    undo()
                    raise
                commit()
                for i in fresh.values():
                    created[i] = True
        return created

    def _sync_dir_once(self, directory: str, index: _Index) -> None:
        """Sync ``directory`` unless this process synced it for ``index`` already."""
        if self.fsync and not index.dir_synced:
            fsync_dir(directory)
            index.dir_synced = True

    def sync(self, directory: str, names: Sequence[str]) -> None:
        """Make the frames of ``names`` in ``directory`` durable (and the segments').

        One ``fdatasync`` per segment holding any of them: it flushes every frame
        written to the file before it, by any process, synced or not.
        """
        if not self.fsync:
            return
        for seg_name in sorted({s for s in map(segment_of, names) if s is not None}):
            path = os.path.join(directory, seg_name)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # nothing was written there: nothing to make durable
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            fsync_dir(directory)

    def replace(
        self,
        directory: str,
        name: str,
        data: bytes,
        if_match: str | None,
        *,
        key: str,
        sync: bool = True,
    ) -> str:
        """Compare-and-swap (append a newer frame for ``name``).

        Synced as :meth:`create` is (the frame, and the directory entry of a
        segment it starts) unless ``sync`` is False.
        """
        seg_name = segment_of(name)
        assert seg_name is not None  # noqa: S101
        path = os.path.join(directory, seg_name)
        segment = self.segment(path)
        with segment.locked(create=if_match is None) as fd:
            if if_match is not None:
                found = None if fd is None else segment.index.live.get(name)
                if fd is None or found is None:
                    raise ObjectNotFoundError(key)
                current = pread(fd, found[1], found[0])
                if _etag(current) != if_match:
                    raise PreconditionFailedError(key)
            assert fd is not None  # noqa: S101
            _, commit, undo = segment.write_frames(fd, [(_PUT, name, data)])
            try:
                if self.fsync and sync:
                    os.fdatasync(fd)
                    # Its creator may have crashed before syncing the entry.
                    self._sync_dir_once(directory, segment.index)
                commit()
            except BaseException:
                undo()
                raise
        return _etag(data)

    def read(self, directory: str, name: str) -> bytes | None:
        """The bytes of ``name``, or None."""
        seg_name = segment_of(name)
        if seg_name is None:
            return None
        return self.segment(os.path.join(directory, seg_name)).read(name)

    def read_many(self, directory: str, names: Sequence[str]) -> list[bytes | None]:
        """Several objects of one directory; each segment is opened once."""
        return cast("list[bytes | None]", self.read_views(directory, names, False))

    def read_views(
        self, directory: str, names: Sequence[str], views: bool = True
    ) -> list[bytes | memoryview | None]:
        """:meth:`read_many`, objects read together in one call as views of its buffer.

        Not copies: for bytes decoded once and dropped (a checkpoint's chunks),
        whose buffer stays alive while any view of it does. ``views=False`` copies
        them (:meth:`read_many`).
        """
        out: list[bytes | memoryview | None] = [None] * len(names)
        segments = list(map(segment_of, names))
        by_segment: dict[str, Sequence[int]] = {}
        first = segments[0] if segments else None
        if first is not None and segments.count(first) == len(segments):
            by_segment[first] = range(len(names))  # a run of records, the usual
        else:
            for i, seg_name in enumerate(segments):
                if seg_name is not None:
                    cast("list[int]", by_segment.setdefault(seg_name, [])).append(i)
        for seg_name, positions in by_segment.items():
            segment = self.segment(os.path.join(directory, seg_name))
            whole = segment.worth_reading_whole(len(positions))
            with segment.reading_whole(whole) as (fd, contents):
                if fd is None:
                    continue
                # A load reads a hundred records here: its passes over them are
                # made by map, min, max and sum, not Python loops (0.7x the time).
                found = list(
                    map(segment.index.live.get, map(names.__getitem__, positions))
                )
                if None in found:
                    positions = [
                        i
                        for i, f in zip(positions, found, strict=True)
                        if f is not None
                    ]
                    found = [f for f in found if f is not None]
                    if not found:
                        continue
                spans = cast("list[tuple[int, int]]", found)
                start = min(map(_first, spans))
                stop = max(map(sum, spans))
                buf: memoryview | None = None
                if contents is not None:
                    buf, start = memoryview(contents), 0
                elif (
                    # A log's records lie side by side: one read of their span, not
                    # one per record, when little of it lies outside them.
                    len(spans) > 1
                    and stop - start <= 2 * sum(map(_second, spans)) + _WINDOW
                ):
                    buf = memoryview(pread_buffer(fd, stop - start, start))
                    if len(buf) != stop - start:
                        buf = None
                if buf is None:
                    for i, (at, length) in zip(positions, spans, strict=True):
                        out[i] = pread(fd, length, at)
                    continue
                for i, (at, length) in zip(positions, spans, strict=True):
                    at -= start
                    view = buf[at : at + length]
                    out[i] = view if views else bytes(view)
        return out

    def delete(self, directory: str, name: str) -> bool:
        """Delete ``name``; unlink its segment once nothing in it is live."""
        seg_name = segment_of(name)
        if seg_name is None:
            return False
        path = os.path.join(directory, seg_name)
        segment = self.segment(path)
        with segment.locked(create=False) as fd:
            if fd is None or name not in segment.index.live:
                return False
            if len(segment.index.live) == 1:
                os.unlink(path)
                segment.drop_fd()
                segment.index = _Index()
            else:
                segment.append(fd, _TOMBSTONE, name, b"")
        if self.fsync:
            fsync_dir(directory)
        return True

    def guard_file(
        self, directory: str, name: str, *, key: str
    ) -> contextlib.AbstractContextManager[None]:
        """Lock ``name``'s segment while a plain file is published.

        Refuses a name that is already a frame, so that a store with
        ``segments=False`` keeps create exclusive against framed records. The
        segment file is created (empty) if it does not exist: its ``flock`` is
        what a framed create of the same name takes, and without the file a
        framed writer could check for the plain file before it is linked, then
        append its own frame (an empty segment holds nothing and is read as such).

        Raises:
            ObjectExistsError: ``name`` is a live frame.
        """
        seg_name = segment_of(name)
        assert seg_name is not None  # noqa: S101
        segment = self.segment(os.path.join(directory, seg_name))

        @contextlib.contextmanager
        def guard() -> Iterator[None]:
            with segment.locked(create=True) as fd:
                if fd is not None and name in segment.index.live:
                    raise ObjectExistsError(key)
                yield

        return guard()

    @staticmethod
    def holds_objects(path: str) -> bool:
        """Whether a segment file holds at least one complete object.

        Cheap: whenever anything in a segment is live, the first frame after the
        file id is a complete put (an emptied segment is unlinked), so only the head
        of the file is read.
        """
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            size = os.fstat(fd).st_size
            # Not past the end: a no-wait read takes a short read for bytes it
            # could not get without waiting.
            head = pread(fd, min(64 * 1024, size), 0)
        finally:
            os.close(fd)
        pos = 0
        while True:
            parsed = _parse(head, pos)
            if parsed is None and head[pos : pos + 4] == _ZERO_WORD:
                return False  # the reserve follows the file id
            if parsed is None:
                return True  # damaged: let readers find out what is left
            if isinstance(parsed, str):
                return size > len(head)  # torn, unless it continues past our read
            kind, _, _, _, end = parsed
            if kind != _FILE_ID:
                return True
            pos = end

    def names(self, directory: str, segment_file: str) -> list[str]:
        """The live names of one segment file of ``directory``."""
        return self.segment(os.path.join(directory, segment_file)).names()

    def inspect_tail(self, directory: str, segment_file: str) -> SegmentTail:
        """What lies past the valid frames of a segment, and its repaired frames.

        The tail's bytes are read without the lock: a writer cutting them at the
        same moment can make this see fewer (it is for reports, not decisions).
        """
        path = os.path.join(directory, segment_file)
        segment = self.segment(path)
        segment.names()
        index = segment.index
        cut: CutTail | None = None
        if index.torn:
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(path, os.O_RDONLY)
                try:
                    cut = inspect_cut(pread(fd, index.torn, index.end))
                finally:
                    os.close(fd)
        return SegmentTail(index.end, index.torn, cut, dict(index.repaired))
