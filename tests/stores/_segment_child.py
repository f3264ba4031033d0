"""Segment files for the tests: an independent frame reader, and a dying child.

The helpers read the frame format documented in :mod:`stores.segments` without
using the store's own parser, so that a test can find a record's frame, damage it on
disk and check what the store makes of it.

The child, run as ``python -m tests.stores._segment_child ROOT MODE ...``:

* ``append KEY POINT SIZE [EMBED]`` creates ``KEY`` (segment mode, fsync on) holding
  ``body_for(KEY, SIZE, EMBED)`` and SIGKILLs itself at POINT (see ``POINTS``). It
  exits with :data:`NOT_REACHED` if the point is never reached.
* ``race IDENT [CACHED OPEN]`` prints ``ready``, then for each stdin line ``create
  KEY...`` creates the keys in order (body ``race_body(IDENT, KEY)``), printing
  ``won ETAG`` or ``lost`` per key and ``end`` after the last; ``claim KEY...`` does
  the same, reading each key just before creating it; ``exit`` (or end of input)
  ends it. The parent releases every racer at once by writing to all of them.
  ``CACHED`` and ``OPEN`` set the store's bounds on idle segment indexes and open
  descriptors (``stores.segments.CACHED_MAX``, ``MAX_OPEN``), so that a racer drops
  and rebuilds indexes and reopens files while the others append to them.
* ``pause KEY SIZE`` creates ``KEY`` like ``append``, but SIGSTOPs itself after
  writing half of the frame (holding the segment's lock) and completes the create
  once continued, then exits 0.
* ``hold SEGMENT`` takes the exclusive ``flock`` of the segment file SEGMENT (a
  path), prints ``held`` and sleeps until it is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import struct
import sys
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from journal.errors import ObjectExistsError, ObjectNotFoundError
from stores import segments
from stores.local import LocalStore
from stores.segments import RECORDS_PER_SEGMENT, segment_of

if TYPE_CHECKING:
    from pathlib import Path

MAGIC = b"AJF1"
PUT, TOMBSTONE, FILE_ID = 1, 2, 3
_HEAD = struct.Struct(">4sBHI")
_CRC = struct.Struct(">I")

POINTS = (
    "mid-write",  # half of the frame written
    "before-fdatasync",  # the whole frame written, not yet synced
    "after-fdatasync",  # synced, create not yet returned
)
NOT_REACHED = 3


# --- the frame format, read independently ------------------------------------------


@dataclass(frozen=True)
class Frame:
    """One complete frame whose header checksum holds."""

    offset: int
    kind: int
    name: str
    data_at: int
    data_len: int
    end: int
    data_ok: bool  # the data checksum holds

    @property
    def header(self) -> range:
        """Offsets of the header bytes covered by the header checksum."""
        return range(self.offset, self.data_at - 4)


def encode_frame(kind: int, name: str, data: bytes) -> bytes:
    """A frame as the module docstring of ``stores.segments`` lays it out."""
    raw = name.encode()
    head = _HEAD.pack(MAGIC, kind, len(raw), len(data)) + raw
    return head + _CRC.pack(zlib.crc32(head)) + data + _CRC.pack(zlib.crc32(data))


def parse_segment(path: Path) -> tuple[list[Frame], int]:
    """The frames from the start of a segment file, and the bytes after the last.

    Stops at the first position that does not hold a complete frame with a valid
    header checksum (a torn tail, or damage that the caller expects to be there),
    at the reserve (zeros where a frame would start), or at a frame written into the
    reserve that fails its data checksum with a sector's share of zeros in it (torn).
    The bytes after the last frame count without the zeros that end the file.
    """
    buf = path.read_bytes()
    frames, end = _frames(buf)
    return frames, _extent(buf, end) - end


def segment_extent(path: Path) -> int:
    """Where the frames and any torn bytes after them end: the file without its
    reserve (the zeros that end it)."""
    buf = path.read_bytes()
    return _extent(buf, _frames(buf)[1])


def _extent(buf: bytes, end: int) -> int:
    tail = buf[end:]
    return end + (len(tail.rstrip(b"\0")) if tail.endswith(bytes(4)) else len(tail))


def _torn_into_reserve(buf: bytes, start: int, end: int) -> bool:
    """A frame in [start, end) that failed its data checksum: whether some sector
    (512 bytes of the file) holds only zeros of it."""
    for sector in range(start // 512 * 512, end, 512):
        if not any(buf[max(sector, start) : min(sector + 512, end)]):
            return True
    return False


def _frames(buf: bytes) -> tuple[list[Frame], int]:
    frames: list[Frame] = []
    pos = 0
    while len(buf) - pos >= _HEAD.size:
        magic, kind, name_len, data_len = _HEAD.unpack_from(buf, pos)
        head_end = pos + _HEAD.size + name_len
        # The first frame of a segment is its file id (kind 3); any other may be a
        # put or a tombstone.
        kinds = (FILE_ID,) if pos == 0 else (PUT, TOMBSTONE)
        if pos == 0 and kind != FILE_ID:
            kinds = (PUT, TOMBSTONE)  # a segment written by hand in a test
        if magic != MAGIC or kind not in kinds or len(buf) < head_end + 4:
            break
        if _CRC.unpack_from(buf, head_end)[0] != zlib.crc32(buf[pos:head_end]):
            break
        data_at = head_end + 4
        end = data_at + data_len + 4
        if len(buf) < end:
            break
        data = buf[data_at : data_at + data_len]
        data_ok = _CRC.unpack_from(buf, end - 4)[0] == zlib.crc32(data)
        reserve_next = len(buf) >= end + 4 and buf[end : end + 4] == bytes(4)
        if not data_ok and reserve_next and _torn_into_reserve(buf, pos, end):
            break
        if kind == FILE_ID:
            pos = end
            continue
        frames.append(
            Frame(
                pos,
                kind,
                buf[pos + _HEAD.size : head_end].decode(),
                data_at,
                data_len,
                end,
                data_ok,
            )
        )
        pos = end
    return frames, pos


def live(frames: list[Frame]) -> dict[str, Frame]:
    """Name -> the frame holding its current bytes (puts and tombstones applied)."""
    out: dict[str, Frame] = {}
    for f in frames:
        if f.kind == PUT:
            out[f.name] = f
        else:
            out.pop(f.name, None)
    return out


def record_name(version: int) -> str:
    return f"{version:020d}.rec"


def segment_name(version: int) -> str:
    """The segment file of a record version (computed here, not by the store)."""
    return f".seg-{version // RECORDS_PER_SEGMENT:020d}"


def record_frame(log_dir: Path, version: int) -> tuple[Path, Frame]:
    """The segment file and the frame holding a record's current bytes."""
    path = log_dir / segment_name(version)
    found = live(parse_segment(path)[0]).get(record_name(version))
    if found is None:
        raise LookupError(f"no frame for version {version} in {path}")
    return path, found


def object_frame(directory: Path, name: str) -> tuple[Path, Frame]:
    """The segment file and the frame holding any framed object's current bytes."""
    seg_name = segment_of(name)
    if seg_name is None:
        raise LookupError(f"{name} is never framed")
    path = directory / seg_name
    found = live(parse_segment(path)[0]).get(name)
    if found is None:
        raise LookupError(f"no frame for {name} in {path}")
    return path, found


def flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    """Damage one byte of a file in place (the file keeps its size and inode)."""
    with path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ mask]))


def flip_record_byte(log_dir: Path, version: int) -> None:
    """Flip the middle byte of a record, whether it is a plain file or a frame."""
    plain = log_dir / record_name(version)
    if plain.exists():
        flip(plain, plain.stat().st_size // 2)
        return
    path, found = record_frame(log_dir, version)
    flip(path, found.data_at + found.data_len // 2)


# --- bodies -------------------------------------------------------------------------


def body_for(key: str, size: int, embed: str | None = None) -> bytes:
    """``size`` deterministic bytes; with ``embed``, a whole frame for that name
    sits in the first quarter (so it is complete in the first half of the body)."""
    seed = hashlib.sha256(key.encode()).digest()
    body = bytearray((seed * (size // len(seed) + 1))[:size])
    if embed is not None:
        inner = encode_frame(PUT, embed, b"a phantom object")
        assert len(inner) < size // 4
        body[16 : 16 + len(inner)] = inner
    return bytes(body)


def race_body(ident: int, key: str) -> bytes:
    seed = f"racer-{ident}:{key};".encode()
    return seed * (8192 // len(seed))


def torn_cut(data: Any, offset: int) -> int:
    """How much of a segment write at ``offset`` a writer killed mid-write leaves.

    The kernel copies a write page by page and stops between pages for a fatal
    signal, so what lands ends on a page (here: a sector) boundary of the file. See
    :func:`torn_length`; the zeros of a new reserve after the frames do not count.
    """
    return torn_length(_frames(bytes(data))[1], offset)


def torn_length(frames_len: int, offset: int) -> int:
    """The last sector boundary within the first half of ``frames_len`` bytes of
    frames written at ``offset``, or the first one after their start (at most all
    but their last byte)."""
    cut = (offset + frames_len // 2) // 512 * 512
    if cut <= offset:
        cut = (offset // 512 + 1) * 512
    return max(0, min(cut, offset + frames_len - 1) - offset)


# --- the child ----------------------------------------------------------------------


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _is_segment(fd: int) -> bool:
    target = os.readlink(f"/proc/self/fd/{fd}")
    return os.path.basename(target).startswith(".seg-")


def _install_pause() -> None:
    """Patch ``os.pwrite`` so that the segment append stops itself halfway."""
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if bytes(data[:4]) == MAGIC:
            half = len(data) // 2
            real_pwrite(fd, bytes(data[:half]), offset)
            os.kill(os.getpid(), signal.SIGSTOP)
            return half + real_pwrite(fd, bytes(data[half:]), offset + half)
        return real_pwrite(fd, data, offset)

    os.pwrite = pwrite


def _hold(path: str) -> int:
    import fcntl
    import time

    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    while True:
        time.sleep(60)


def _install(point: str) -> None:
    """Patch the ``os`` functions the segment append calls so it dies at ``point``."""
    real_pwrite, real_fdatasync = os.pwrite, os.fdatasync

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if point == "mid-write" and bytes(data[:4]) == MAGIC:
            real_pwrite(fd, bytes(data[: torn_cut(data, offset)]), offset)
            _die()
        return real_pwrite(fd, data, offset)

    def fdatasync(fd: int) -> None:
        if point == "before-fdatasync" and _is_segment(fd):
            _die()
        real_fdatasync(fd)
        if point == "after-fdatasync" and _is_segment(fd):
            _die()

    os.pwrite, os.fdatasync = pwrite, fdatasync


async def _race(store: LocalStore, ident: int) -> None:
    print("ready", flush=True)
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        cmd = line.split()
        if not cmd or cmd[0] == "exit":
            return
        if cmd[0] not in ("create", "claim"):
            print(f"error unknown command {line!r}", flush=True)
            continue
        for key in cmd[1:]:
            try:
                if cmd[0] == "claim":
                    with contextlib.suppress(ObjectNotFoundError):
                        await store.read(key)
                etag = await store.create(key, race_body(ident, key))
            except ObjectExistsError:
                print("lost", flush=True)
            except Exception as exc:  # reported to the parent, which fails the test
                print(f"error {exc!r}", flush=True)
            else:
                print(f"won {etag}", flush=True)
        print("end", flush=True)


def main(argv: list[str]) -> int:
    root, mode = argv[0], argv[1]
    store = LocalStore(root)
    if mode == "race":
        if len(argv) > 3:
            segments.CACHED_MAX, segments.MAX_OPEN = int(argv[3]), int(argv[4])
        asyncio.run(_race(store, int(argv[2])))
        return 0
    if mode == "hold":
        return _hold(argv[2])
    if mode == "pause":
        key, size = argv[2], int(argv[3])
        _install_pause()
        asyncio.run(store.create(key, body_for(key, size)))
        return 0
    if mode != "append":
        raise SystemExit(f"unknown mode {mode!r}")
    key, point, size = argv[2], argv[3], int(argv[4])
    embed = argv[5] if len(argv) > 5 else None
    if point not in POINTS:
        raise SystemExit(f"unknown point {point!r}")
    _install(point)
    asyncio.run(store.create(key, body_for(key, size, embed)))
    return NOT_REACHED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
