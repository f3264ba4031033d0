"""``journal.checksum``: one CRC-32, whichever library computes it.

Records, frames and checkpoints written with zlib-ng's ``crc32`` (the ``fast``
extra) must read back without it and the other way round: both must give zlib's
values, for bytes and for views, with and without a running value.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import pytest

from journal import checksum, codec


@pytest.mark.parametrize("size", [0, 1, 15, 39, 2_300, 70_000])
def test_crc32_gives_zlibs_values(size):
    data = os.urandom(size)
    assert checksum.crc32(data) == zlib.crc32(data)
    view = memoryview(data)[size // 3 :]
    assert checksum.crc32(view) == zlib.crc32(view)
    assert checksum.crc32(data, 12345) == zlib.crc32(data, 12345)


def test_the_fast_extra_is_what_computes_it_when_installed():
    # The test extra installs it: a plain zlib here would leave the fast path
    # untested while claiming its speed.
    from zlib_ng import zlib_ng

    assert checksum.crc32 is zlib_ng.crc32


def test_without_zlib_ng_the_standard_library_checks_what_it_wrote(tmp_path):
    # A record framed in this process (with zlib-ng) is read back by a process
    # that cannot import it, and that process's own record reads back here.
    record = codec.encode_record(
        version=1,
        epoch=1,
        writer="w",
        batch_id="b",
        run_id=None,
        committed_at=1.0,
        prev_hash=codec.GENESIS_HASH,
        events=[],
    )
    written = tmp_path / "here.rec"
    written.write_bytes(record.data)
    script = f"""
import sys
sys.modules["zlib_ng"] = None  # as if the fast extra were not installed
import zlib
from journal import checksum, codec
assert checksum.crc32 is zlib.crc32, checksum.crc32
parsed = codec.parse_record(open({str(written)!r}, "rb").read(), label='t', version=1)
assert parsed.body.writer == "w"
again = codec.encode_record(
    version=1, epoch=1, writer="there", batch_id="b", run_id=None,
    committed_at=1.0, prev_hash=codec.GENESIS_HASH, events=[],
)
open({str(tmp_path / "there.rec")!r}, "wb").write(again.data)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    there = codec.parse_record(
        (tmp_path / "there.rec").read_bytes(), label="t", version=1
    )
    assert there.body.writer == "there"
    # A flipped byte still fails the check computed by either library.
    damaged = bytearray((tmp_path / "there.rec").read_bytes())
    damaged[20] ^= 1
    with pytest.raises(codec.CorruptRecordError, match="checksum"):
        codec.parse_record(bytes(damaged), label="t", version=1)
