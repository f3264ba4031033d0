"""Chunk index blobs: a long chunk list, stored once for every checkpoint naming it.

A checkpoint names every chunk of the context. Listed flat, that list grows with the
thread and every checkpoint repeats it, so the checkpoints of a thread weigh the
square of its length: a 5,000-turn agent thread's 143 checkpoints held 2.2 MB of
digests, more than a quarter of the text, and the last ones 24 KB each.

Once a list reaches :data:`INDEX_MIN_REFS` references, runs of blob digests are
grouped into index blobs, and the checkpoint names each group as ``#1<digest>``.
Group boundaries are content-defined, like the chunks' own: a group ends after a
reference whose digest ends in a byte divisible by :data:`INDEX_FANOUT`, or at
:data:`INDEX_MAX_REFS` references. So appending chunks leaves the earlier groups,
and their blobs, as they were: the next checkpoint writes only the groups completed
since. While a list still holds :data:`INDEX_MIN_REFS` or more references, the level-1
references are grouped the same way into level-2 indexes (``#2<digest>``), and so on
up to :data:`INDEX_LEVELS`. A group's incomplete end stays in the checkpoint, and log
spans (``@...``) are never grouped: retention rewrites them in place.

An index blob is a msgpack array of the references it stands for, every one of the
level below (bare digests for level 1); its name is the SHA-256 of those bytes, and
it is stored and checked like any chunk blob. Everything here is pure.
"""

from __future__ import annotations

import hashlib
import re

import msgspec

__all__ = [
    "INDEX_FANOUT",
    "INDEX_LEVELS",
    "INDEX_MAX_REFS",
    "INDEX_MIN_REFS",
    "MAX_CHUNK_REFS",
    "MAX_INDEX_BYTES",
    "decode_index",
    "pack_refs",
    "parse_index_ref",
]

INDEX_MIN_REFS = 64
"""References a chunk list needs before it is grouped (shorter lists stay flat).

A list this short costs a checkpoint at most about 4 KB; grouping it would cost a
load one more round of blob reads for little.
"""
INDEX_FANOUT = 16
"""A group ends after one reference in this many, on average."""
INDEX_MAX_REFS = 64
"""The most references one index blob holds."""
INDEX_LEVELS = 4
"""The deepest index level written or read (16 ** 4 chunks take level 4)."""
MAX_CHUNK_REFS = 1 << 22
"""The most chunk references a checkpoint's indexes may stand for, whatever message
count it claims. Each stands for a message at least (a chunk holds 64 on average):
no context that fits in memory comes near, while four levels of index blobs can name
64 ** 4 references apiece, and a damaged or hostile checkpoint's count bounds
nothing."""
MAX_INDEX_BYTES = 64 * 1024
"""The most bytes an index blob may decompress to when read. One holds at most
:data:`INDEX_MAX_REFS` references of 66 characters (about 4.4 KB): a stored frame
claiming more is refused before it is decompressed, not allocated."""

_INDEX_REF = re.compile(r"#([1-9])([0-9a-f]{64})")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_HEX = re.compile(r"[0-9a-f]*")
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[str])


def parse_index_ref(ref: str) -> tuple[int, str] | None:
    """The level and digest an index reference names; None for any other reference.

    Raises:
        ValueError: It starts like an index reference (``#``) but is not a valid one.
    """
    if not ref.startswith("#"):
        return None
    found = _INDEX_REF.fullmatch(ref)
    if found is None or int(found.group(1)) > INDEX_LEVELS:
        raise ValueError(f"malformed chunk index reference {ref[:80]!r}")
    return int(found.group(1)), found.group(2)


def _level(ref: str) -> int:
    """0 for a blob digest, the level of an index reference, -1 for a log span."""
    if ref.startswith("#"):
        return ord(ref[1]) - 48
    return -1 if ref.startswith("@") else 0


def _ends_group(ref: str) -> bool:
    return int(ref[-2:], 16) % INDEX_FANOUT == 0


def pack_refs(refs: list[str]) -> tuple[list[str], list[tuple[str, bytes]]]:
    """Group a checkpoint's chunk references: what it stores, and the index blobs.

    Returns:
        The references to store (``refs`` itself when it is too short to group),
        and ``(digest, bytes)`` of every index blob they name, new or not.
    """
    blobs: list[tuple[str, bytes]] = []
    for level in range(INDEX_LEVELS):
        if len(refs) < INDEX_MIN_REFS:
            break
        out: list[str] = []
        group: list[str] = []
        for ref in refs:
            if _level(ref) != level:
                out += group  # an incomplete group stays in the list
                group = []
                out.append(ref)
                continue
            group.append(ref)
            if len(group) == INDEX_MAX_REFS or _ends_group(ref):
                data = _encoder.encode(group)
                digest = hashlib.sha256(data).hexdigest()
                blobs.append((digest, data))
                out.append(f"#{level + 1}{digest}")
                group = []
        out += group
        refs = out
    return refs, blobs


def decode_index(data: bytes | memoryview, level: int) -> list[str]:
    """The references an index blob of ``level`` stands for.

    Raises:
        ValueError: The bytes are not an index of that level: not a list of
            references, empty, longer than :data:`INDEX_MAX_REFS`, or holding a
            reference of another level.
    """
    try:
        refs = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"chunk index does not decode: {exc}") from None
    if not 0 < len(refs) <= INDEX_MAX_REFS:
        raise ValueError(f"chunk index holds {len(refs)} references")
    # Level 1, the common case, is checked in one match over the joined digests.
    if (
        level == 1
        and all(len(ref) == 64 for ref in refs)
        and _HEX.fullmatch("".join(refs)) is not None
    ):
        return refs
    for ref in refs:
        if level == 1:
            valid = _DIGEST.fullmatch(ref) is not None
        else:
            parsed = parse_index_ref(ref) if ref.startswith("#") else None
            valid = parsed is not None and parsed[0] == level - 1
        if not valid:
            raise ValueError(
                f"chunk index of level {level} holds the reference {ref[:80]!r}"
            )
    return refs
