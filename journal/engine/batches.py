"""The idempotency window: which batch ids the last records of a thread used.

A retry of an append whose acknowledgement was lost must find the record it already
committed, even when that record lies before the checkpoint a restarted writer
rebuilds from, or was removed by retention. So every checkpoint carries, for each of
the last :data:`IDEMPOTENCY_WINDOW` records up to its version, a short key of the
record's batch id and a short digest of its events (each checkpoint inherits the
entries of the one it was built from, so the window survives any number of
checkpoints, restarts and retention passes, which keep the checkpoint they rely on).

The record does not say whether its batch id was given by the caller or generated,
so every record has an entry: :data:`ENTRY_SIZE` bytes each, ``ENTRY_SIZE *
IDEMPOTENCY_WINDOW`` (3 KiB) per checkpoint once a thread is that long.

A key match alone is not trusted while the record can still be read: the writer
compares the record's full batch id and digest (see ``ThreadWriter``). Only when
retention removed the record is the short digest all there is.
"""

from __future__ import annotations

import hashlib
from collections import deque

__all__ = [
    "DIGEST_SIZE",
    "ENTRY_SIZE",
    "IDEMPOTENCY_WINDOW",
    "KEY_SIZE",
    "BatchWindow",
    "batch_key",
]

IDEMPOTENCY_WINDOW = 256
"""Records a retry may lag behind the head: a batch is recognised as long as fewer
than this many records were committed after it (the retrying writer's fence counts).
"""

KEY_SIZE = 8
"""Bytes of SHA-256(batch id) kept per record."""

DIGEST_SIZE = 4
"""Bytes of the record's content digest kept per record: enough to tell a retry
with different events (a caller's mistake) in all but one case in 2**32, when
retention left nothing else to compare with."""

ENTRY_SIZE = KEY_SIZE + DIGEST_SIZE


def batch_key(batch_id: str) -> bytes:
    """The short key a batch id is known by in the window."""
    return hashlib.sha256(batch_id.encode()).digest()[:KEY_SIZE]


class BatchWindow:
    """The batch keys and digests of the records ``(head - len, head]``.

    Entries are per version, consecutive and ending at :attr:`head`; a batch id
    used twice (a retry from beyond the window) is found at its newest version.
    """

    __slots__ = ("_entries", "_latest", "head", "size")

    def __init__(self, head: int = 0, size: int = IDEMPOTENCY_WINDOW) -> None:
        self.head = head
        self.size = size
        self._entries: deque[bytes] = deque()
        self._latest: dict[bytes, int] = {}

    @classmethod
    def unpack(
        cls, head: int, packed: bytes, size: int = IDEMPOTENCY_WINDOW
    ) -> BatchWindow:
        """The window a checkpoint at ``head`` stored as ``packed``.

        Raises:
            ValueError: ``packed`` is not a whole number of entries, or reaches
                before version 1.
        """
        count, rest = divmod(len(packed), ENTRY_SIZE)
        if rest or count > head:
            raise ValueError(
                f"batch window of {len(packed)} bytes does not fit version {head}"
            )
        window = cls(head - count, size)
        for i in range(count):
            entry = packed[i * ENTRY_SIZE : (i + 1) * ENTRY_SIZE]
            window._push(entry)
        return window

    def pack(self) -> bytes:
        """The entries as a checkpoint stores them, oldest first."""
        return b"".join(self._entries)

    def add(self, version: int, batch_id: str, content_digest: bytes) -> None:
        """Record that ``version`` committed ``batch_id`` with these events."""
        if version != self.head + 1:
            # Not the next record (cannot happen along one log): start afresh
            # rather than misnumber entries.
            self._entries.clear()
            self._latest.clear()
            self.head = version - 1
        self._push(batch_key(batch_id) + content_digest[:DIGEST_SIZE])

    def _push(self, entry: bytes) -> None:
        self.head += 1
        self._entries.append(entry)
        self._latest[entry[:KEY_SIZE]] = self.head
        while len(self._entries) > self.size:
            old = self._entries.popleft()
            key = old[:KEY_SIZE]
            if self._latest.get(key, 0) <= self.head - self.size:
                del self._latest[key]

    def find(self, batch_id: str) -> tuple[int, bytes] | None:
        """The newest version whose batch key is ``batch_id``'s, and its digest.

        The key is short: the caller confirms against the record where it exists.
        """
        version = self._latest.get(batch_key(batch_id))
        if version is None:
            return None
        entry = self._entries[version - (self.head - len(self._entries)) - 1]
        return version, entry[KEY_SIZE:]

    def __len__(self) -> int:
        return len(self._entries)
