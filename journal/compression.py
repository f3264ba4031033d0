"""Optional zstd compression of what a writer stores (the ``zstd`` extra).

``Journal.open(..., compression="zstd")`` makes its writers compress each record's
body and each blob (message chunks, large payloads) with zstd, level 1: on the
benchmark's conversation text records shrink to about 0.6 of their size and chunks
to about 0.45, for ~12 µs per record (``benchmarks/bench_commit.py``). Readers need
no option: a compressed record has its own magic (``AJZ1``) and a compressed blob
starts with zstd's frame magic, which no uncompressed blob (a msgpack array or map)
can start with, so any journal reads both. Hashes are taken over the uncompressed
bytes: the hash chain, batch digests and content addresses do not depend on
whether, or how well, anything was compressed.

Reading compressed data without ``zstandard`` installed raises
:class:`CompressionUnavailableError`, naming the extra to install.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from journal.errors import CompressionUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "COMPRESSIONS",
    "MAX_SIZE",
    "FrameTooLargeError",
    "compressor",
    "decompress",
    "is_compressed",
]

COMPRESSIONS = ("zstd",)
"""The values ``Journal(compression=...)`` accepts besides None."""

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_LEVEL = 1
MAX_SIZE = 1 << 31
"""The most bytes any frame may decompress to (a frame claiming more is refused
rather than allocated); readers of blobs with a known bound ask for less."""
_local = threading.local()  # zstandard's (de)compressors are not thread-safe


class FrameTooLargeError(ValueError):
    """A zstd frame holds more bytes than its reader allows (nothing was allocated)."""


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError:
        raise CompressionUnavailableError from None
    return zstandard


def compressor(name: str | None) -> Callable[[bytes], bytes] | None:
    """The compress function for a ``compression`` setting (None: no compression).

    Raises:
        ValueError: ``name`` is not None or one of :data:`COMPRESSIONS`.
        CompressionUnavailableError: ``zstandard`` is not installed.
    """
    if name is None:
        return None
    if name not in COMPRESSIONS:
        raise ValueError(
            f"unknown compression {name!r}: use one of {COMPRESSIONS} or None"
        )
    _zstd()
    return _compress


def _compress(data: bytes) -> bytes:
    engine = getattr(_local, "compressor", None)
    if engine is None:
        engine = _local.compressor = _zstd().ZstdCompressor(level=_LEVEL)
    out: bytes = engine.compress(data)
    return out


def is_compressed(data: bytes | memoryview) -> bool:
    """Whether a blob's stored bytes are a zstd frame."""
    return data[:4] == ZSTD_MAGIC


def decompress(data: bytes | memoryview, limit: int = MAX_SIZE) -> bytes:
    """The bytes a zstd frame holds, at most ``limit`` of them.

    Raises:
        FrameTooLargeError: The frame holds more than ``limit`` bytes.
        ValueError: The frame is damaged.
        CompressionUnavailableError: ``zstandard`` is not installed.
    """
    zstandard = _zstd()
    engine = getattr(_local, "decompressor", None)
    if engine is None:
        engine = _local.decompressor = zstandard.ZstdDecompressor()
    try:
        size = zstandard.frame_content_size(data)
        if size > limit:
            # Named in the frame's header: refused before anything is allocated.
            raise FrameTooLargeError(
                f"zstd frame holds {size} bytes, more than the {limit} allowed"
            )
        if size >= 0:
            out: bytes = engine.decompress(data, max_output_size=limit)
            return out
        # A frame that does not name its size (writers' frames all do): read one
        # byte past the limit at most, to tell a frame that holds more.
        with engine.stream_reader(data) as reader:
            out = reader.read(limit + 1)
    except zstandard.ZstdError as exc:
        raise ValueError(f"zstd frame does not decompress: {exc}") from None
    if len(out) > limit:
        raise FrameTooLargeError(
            f"zstd frame holds more than the {limit} bytes allowed"
        )
    return out
