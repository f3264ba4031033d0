"""The windowed index scan of a segment file finds what a whole-file parse finds.

``_Segment._scan`` reads a segment a window at a time and jumps over the data of
large frames. Whatever the frame sizes, name lengths, reserves, torn tails or damaged
headers, its index must equal the one built by parsing the whole file in one buffer
(the module's own ``_parse`` and ``_resync`` over all the bytes, with the reserve and
torn-write rules of the module docstring applied by the tests' independent reader),
also when the file is indexed in two steps as it grows.
"""

from __future__ import annotations

import os
import zlib
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores import _nowait
from stores import segments as sg
from tests.stores._segment_child import _torn_into_reserve

if TYPE_CHECKING:
    from pathlib import Path

_ID = os.urandom(16)


def _reference(buf: bytes) -> tuple[dict[str, tuple[int, int]], int, bytes | None]:
    """Live names, the end of the last valid frame, and the file id."""
    live: dict[str, tuple[int, int]] = {}
    pos = end = 0
    file_id = None
    while pos < len(buf):
        parsed = sg._parse(buf, pos)
        if parsed == sg._SHORT:
            break
        if parsed is None:
            if buf[pos : pos + 4] == bytes(4):
                break  # the reserve
            nxt = sg._resync(buf, pos + 1)
            if nxt is None:
                break
            pos = nxt
            continue
        assert not isinstance(parsed, str)
        kind, name, data_at, length, nxt = parsed
        data_ok = zlib.crc32(buf[data_at : data_at + length]) == int.from_bytes(
            buf[nxt - 4 : nxt], "big"
        )
        if (
            not data_ok
            and buf[nxt : nxt + 4] == bytes(4)
            and _torn_into_reserve(buf, pos, nxt)
        ):
            break  # written into the reserve, never completed
        pos = nxt
        if kind == sg._PUT:
            live[name] = (data_at, length)
        elif kind == sg._TOMBSTONE:
            live.pop(name, None)
        elif data_at == sg._ID_FRAME_SIZE - 4 - 16:
            file_id = buf[data_at : data_at + length]
        end = pos
    return live, end, file_id


def _torn(buf: bytes, end: int) -> int:
    """Bytes after the frames, without the zeros of a reserve that ends the file."""
    tail = buf[end:]
    return len(tail.rstrip(b"\0")) if tail.endswith(bytes(4)) else len(tail)


_sizes = st.one_of(
    st.integers(0, 300),
    st.integers(3_000, 6_000),
    st.integers(20_000, 300_000),
)
_frames = st.lists(
    st.tuples(
        st.sampled_from([sg._PUT, sg._PUT, sg._TOMBSTONE]),
        st.integers(0, 7),  # which name
        st.sampled_from([1, 40, 5_000]),  # name length: one beyond a small window
        _sizes,
    ),
    min_size=1,
    max_size=12,
)


def _index_of(path: Path) -> sg._Index:
    segment = sg._Segment(str(path), fsync=False)
    segment.names()
    return segment.index


def _index_read_whole(path: Path) -> tuple[sg._Index, bytes]:
    """The index a cold reader builds from the file read in one call, and the
    bytes it read."""
    segment = sg._Segment(str(path), fsync=False)
    with segment.reading_whole(True) as (fd, contents):
        assert fd is not None
    assert contents is not None or path.stat().st_size == 0
    return segment.index, bytes(contents or b"")


def _index_without_waiting(path: Path) -> sg._Index:
    """The index a no-wait read builds (the file was just written: it is cached;
    a page the kernel still wants to read ahead is read once, then it is tried
    again)."""
    for _ in range(5):
        segment = sg._Segment(str(path), fsync=False)
        try:
            with _nowait.attempt():
                segment.names()
        except _nowait.WouldBlock:
            path.read_bytes()
            continue
        return segment.index
    raise AssertionError(f"{path} could not be read without waiting")


# Both scan properties: 150 examples each, file-writing ones (no deadline), on the
# function-scoped tmp_path (each example writes a file of its own name).
_scan_settings = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@_scan_settings
@given(
    frames=_frames,
    reserve=st.sampled_from([0, 0, 9, 4096, sg.RESERVE]),
    damage=st.sampled_from(["none", "truncate", "flip", "tear"]),
    where=st.floats(0, 1),
    split=st.floats(0, 1),
)
def test_windowed_scan_equals_a_whole_file_parse(
    tmp_path, frames, reserve, damage, where, split
):
    _check_scan(tmp_path, frames, reserve, damage, where, split)


# Runs of many small frames: what the scan's fast path (``_plain_frames``) takes,
# with damage anywhere among them for it to stop at.
_small_frames = st.lists(
    st.tuples(
        st.sampled_from([sg._PUT, sg._PUT, sg._PUT, sg._TOMBSTONE]),
        st.integers(0, 30),
        st.sampled_from([1, 24]),
        st.integers(0, 700),
    ),
    min_size=1,
    max_size=150,
)


@_scan_settings
@given(
    frames=_small_frames,
    reserve=st.sampled_from([0, 9, 4096]),
    damage=st.sampled_from(["none", "truncate", "flip", "tear", "head", "head"]),
    where=st.floats(0, 1),
    split=st.floats(0, 1),
)
def test_scan_of_many_small_frames_equals_a_whole_file_parse(
    tmp_path, frames, reserve, damage, where, split
):
    _check_scan(tmp_path, frames, reserve, damage, where, split)


def _check_scan(tmp_path, frames, reserve, damage, where, split):
    path = tmp_path / f"seg-{os.urandom(4).hex()}"
    parts = [sg.frame(sg._FILE_ID, "", _ID)]
    for kind, which, name_len, size in frames:
        name = (f"n{which}-" * name_len)[:name_len]
        data = b"" if kind == sg._TOMBSTONE else os.urandom(size)
        parts.append(sg.frame(kind, name, data))
    buf = b"".join(parts) + bytes(reserve)
    if damage == "tear":
        # A sector of the last frame never reached the disk: zeros there.
        start = len(buf) - reserve - len(parts[-1])
        stop = len(buf) - reserve
        first, last = start // 512, (stop - 1) // 512
        sector = first + int((last - first) * where)
        lo, hi = max(start, sector * 512), min(stop, (sector + 1) * 512)
        buf = buf[:lo] + bytes(hi - lo) + buf[hi:]
    elif damage == "truncate":
        buf = buf[: int(len(buf) * where)]
    elif damage == "flip" and buf:
        at = int((len(buf) - 1) * where)
        buf = buf[:at] + bytes([buf[at] ^ 0x5A]) + buf[at + 1 :]
    elif damage == "head":
        # One byte of one frame's header (magic, kind, lengths, name, checksum).
        k = 1 + int((len(parts) - 2) * where)
        start = sum(map(len, parts[:k]))
        head_len = sg._HEAD.size + int.from_bytes(parts[k][5:7], "big") + 4
        at = start + int(where * 7919) % head_len
        buf = buf[:at] + bytes([buf[at] ^ 0x5A]) + buf[at + 1 :]
    # Indexed in two steps: the first part, then the rest appended.
    cut = int(len(buf) * split)
    path.write_bytes(buf[:cut])
    segment = sg._Segment(str(path), fsync=False)
    segment.names()
    with path.open("ab") as fh:
        fh.write(buf[cut:])
    segment.names()
    live, end, file_id = _reference(buf)
    grown = segment.index
    fresh = _index_of(path)
    assert fresh.live == live
    assert fresh.end == end
    assert fresh.torn == _torn(buf, end)
    assert fresh.file_id == file_id
    # Read on the event loop (no-wait mode), the scan parses bytearrays: the same
    # index.
    waited = _index_without_waiting(path)
    assert (waited.live, waited.end, waited.torn, waited.file_id) == (
        fresh.live,
        fresh.end,
        fresh.torn,
        fresh.file_id,
    )
    # Indexed from the whole file read in one call (a cold reader of many
    # objects): the same index, and each object's bytes where it says.
    whole, contents = _index_read_whole(path)
    assert (whole.live, whole.end, whole.torn, whole.file_id) == (
        fresh.live,
        fresh.end,
        fresh.torn,
        fresh.file_id,
    )
    assert contents == buf
    # The two-step index agrees wherever the first step did not stop at damage
    # that the rest of the file then explained differently.
    if _reference(buf[:cut])[1] == cut or cut == 0:
        assert grown.live == live
        assert grown.end == end


def test_a_torn_large_frame_after_a_large_frame(tmp_path):
    """The scan skips the data of a large frame with a small window; a torn large
    frame right after it must still be found torn, not taken for an object."""
    path = tmp_path / "seg"
    first = sg.frame(sg._PUT, "a", os.urandom(100_000))
    second = sg.frame(sg._PUT, "b", os.urandom(100_000))
    # No zero bytes: a torn tail counts its bytes up to the last non-zero one.
    third = sg.frame(sg._PUT, "c", os.urandom(600_000).replace(b"\0", b"\1"))
    whole = sg.frame(sg._FILE_ID, "", _ID) + first + second + third
    for cut in (len(whole) - len(third) // 2, len(whole) - len(third) + 20):
        path.write_bytes(whole[:cut])
        index = _index_of(path)
        assert sorted(index.live) == ["a", "b"]
        assert index.end == len(whole) - len(third)
        assert index.torn == cut - index.end
    path.write_bytes(whole)
    assert sorted(_index_of(path).live) == ["a", "b", "c"]


def test_a_frame_torn_into_the_reserve(tmp_path):
    """A frame written into the reserve that fails its data checksum where a sector
    of it is zeros was never completed: no object, and its bytes are a torn tail.
    The same failure without zeros, or in a frame followed by another, is damage
    to a written frame: kept, and served for the journal's checksum to report."""
    path = tmp_path / "seg"
    head = sg.frame(sg._FILE_ID, "", _ID)
    a = sg.frame(sg._PUT, "a", os.urandom(3000))
    b = sg.frame(sg._PUT, "b", os.urandom(3000))
    while b[-1] == 0:
        # A torn tail counts its bytes up to the last non-zero one: b ending in a
        # zero byte of its checksum (1 in 256) would count one fewer.
        b = sg.frame(sg._PUT, "b", os.urandom(3000))
    whole = head + a + b + bytes(sg.RESERVE)
    b_at = len(head) + len(a)
    sector = (b_at // 512 + 2) * 512  # wholly inside b's data

    def scan(buf: bytes) -> sg._Index:
        path.write_bytes(buf)
        return _index_of(path)

    intact = scan(whole)
    assert (sorted(intact.live), intact.end, intact.torn) == (
        ["a", "b"],
        b_at + len(b),
        0,
    )
    torn = scan(whole[:sector] + bytes(512) + whole[sector + 512 :])
    assert (sorted(torn.live), torn.end, torn.torn) == (["a"], b_at, len(b))
    flipped = bytearray(whole)
    flipped[sector + 7] ^= 0x01
    damaged = scan(bytes(flipped))
    assert (sorted(damaged.live), damaged.torn) == (["a", "b"], 0)
    # A frame followed by another frame is never a torn write, zeros or not.
    a_sector = (len(head) // 512 + 2) * 512
    middle = scan(whole[:a_sector] + bytes(512) + whole[a_sector + 512 :])
    assert sorted(middle.live) == ["a", "b"]
