"""The key layout of a thread: the one place that names a thread's objects.

Under the thread's prefix (``ThreadKey.prefix``)::

    log/<20-digit version>.rec       one record per version, created exclusively
    checkpoints/<20-digit version>.ckpt
    blobs/<sha256 hex>               large event payloads and message chunks
    indexes/<sha256 hex>             chunk index blobs of long checkpoints
    LAST_CHECKPOINT                  hint: the newest checkpoint's version, as text
    LEASE                            the writer lease
    RETENTION                        marker: records before it were removed on purpose

Versions are zero-padded to :data:`VERSION_WIDTH` digits so that lexicographic
listing order is version order. The engine, the local store's segment routing and the
contract suites all read these names from here: a change made anywhere else would
silently send records to the wrong segment.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from journal.keys import ThreadKey

__all__ = [
    "BLOB_DIR",
    "BLOB_NAME",
    "CHECKPOINT_DIR",
    "CHECKPOINT_SUFFIX",
    "DURABLE_CURSOR_DIR",
    "DURABLE_QUEUE_DIR",
    "DURABLE_ROOT",
    "HINT_NAME",
    "IDS_NAME",
    "INDEX_DIR",
    "LEASE_NAME",
    "LOG_DIR",
    "RECORD_NAME",
    "RECORD_SUFFIX",
    "RETENTION_NAME",
    "VERSION_WIDTH",
    "ThreadLayout",
    "encode_hint",
    "parse_hint",
    "record_name",
    "version_name",
    "version_of",
]

VERSION_WIDTH = 20
"""Digits of a version in record and checkpoint names (zero-padded)."""
RECORD_SUFFIX = ".rec"
CHECKPOINT_SUFFIX = ".ckpt"
LOG_DIR = "log"
CHECKPOINT_DIR = "checkpoints"
BLOB_DIR = "blobs"
INDEX_DIR = "indexes"
"""Chunk index blobs (:mod:`journal.chunk_index`), apart from the chunks: a load
reads them first, and in the local store's segments this keeps them in a small
segment file of their own, not among the chunks read after them."""
LEASE_NAME = "LEASE"
HINT_NAME = "LAST_CHECKPOINT"
RETENTION_NAME = "RETENTION"
IDS_NAME = "IDS"
"""A thread's ids (JSON), kept only where its path hashes a long id: written before
its ``LEASE``, it names the thread before any record does and after retention."""

DURABLE_ROOT = "~durable"
"""The durable turns' index (:mod:`journal.durable.index`), beside the namespaces.

Named here because erasing a thread must also erase its queued turns and cursor."""
DURABLE_QUEUE_DIR = f"{DURABLE_ROOT}/q/"
"""Queued turns and control requests: ``<shard>/<thread prefix>/<entry>``."""
DURABLE_CURSOR_DIR = f"{DURABLE_ROOT}/cursor/"
"""Cursor hints: ``<thread prefix>``."""

RECORD_NAME = re.compile(rf"^(\d{{{VERSION_WIDTH}}}){re.escape(RECORD_SUFFIX)}$")
"""A record's file name; group 1 is its version's digits."""
BLOB_NAME = re.compile(r"^[0-9a-f]{64}$")
"""A content-addressed blob's file name (a SHA-256 in lowercase hex)."""


def version_name(version: int) -> str:
    """``version`` zero-padded to :data:`VERSION_WIDTH` digits."""
    return f"{version:0{VERSION_WIDTH}d}"


@functools.lru_cache(maxsize=8192)
def record_name(version: int) -> str:
    """The file name of the record at ``version`` (its key's last part)."""
    # Cached: a process loading many threads names the same low versions in each.
    return f"{version:0{VERSION_WIDTH}d}{RECORD_SUFFIX}"


def version_of(key: str) -> int | None:
    """The version named by a record or checkpoint key, or None for other keys."""
    name = key.rsplit("/", 1)[-1]
    stem, dot, suffix = name.partition(".")
    if not dot or len(stem) != VERSION_WIDTH or not stem.isdigit():
        return None
    if "." + suffix not in (RECORD_SUFFIX, CHECKPOINT_SUFFIX):
        return None
    return int(stem)


def encode_hint(version: int) -> bytes:
    """The bytes of a ``LAST_CHECKPOINT`` hint naming ``version``."""
    return f"{version_name(version)}\n".encode()


def parse_hint(data: bytes) -> int:
    """The version a ``LAST_CHECKPOINT`` hint names; 0 when it is garbled."""
    text = data.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else 0


class ThreadLayout:
    """The keys of one thread's objects.

    Args:
        prefix: The thread's prefix (``ThreadKey.prefix``), without a trailing slash.
    """

    __slots__ = (
        "blob_dir",
        "checkpoint_dir",
        "hint_key",
        "ids_key",
        "index_dir",
        "lease_key",
        "log_dir",
        "prefix",
        "retention_key",
    )

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.log_dir = f"{prefix}/{LOG_DIR}/"
        self.checkpoint_dir = f"{prefix}/{CHECKPOINT_DIR}/"
        self.blob_dir = f"{prefix}/{BLOB_DIR}/"
        self.index_dir = f"{prefix}/{INDEX_DIR}/"
        self.lease_key = f"{prefix}/{LEASE_NAME}"
        self.hint_key = f"{prefix}/{HINT_NAME}"
        self.retention_key = f"{prefix}/{RETENTION_NAME}"
        self.ids_key = f"{prefix}/{IDS_NAME}"

    @classmethod
    def of(cls, key: ThreadKey) -> ThreadLayout:
        """The layout of the thread ``key``."""
        return cls(key.prefix)

    def record_key(self, version: int) -> str:
        """The key of the record at ``version``."""
        return f"{self.log_dir}{record_name(version)}"

    def checkpoint_key(self, version: int) -> str:
        """The key of the checkpoint at ``version``."""
        return f"{self.checkpoint_dir}{version:0{VERSION_WIDTH}d}{CHECKPOINT_SUFFIX}"

    def blob_key(self, digest: str) -> str:
        """The key of the blob whose SHA-256 hex digest is ``digest``."""
        return f"{self.blob_dir}{digest}"

    def index_key(self, digest: str) -> str:
        """The key of the chunk index blob whose SHA-256 hex digest is ``digest``."""
        return f"{self.index_dir}{digest}"
