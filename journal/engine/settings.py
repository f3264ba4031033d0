"""What every part of the engine shares about one journal: its store and policies."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from journal.engine.log import ThreadLog
from journal.keys import ThreadKey

if TYPE_CHECKING:
    # Names of struct fields too (TC004): these structs are built, never
    # decoded into, so msgspec never resolves their annotations.
    from collections.abc import Callable  # noqa: TC004

    from journal.checkpoint import CheckpointPolicy  # noqa: TC004
    from journal.engine.thread_index import ThreadIndex  # noqa: TC004
    from journal.keyring import Keyring  # noqa: TC004
    from journal.seals import Signer  # noqa: TC004
    from journal.store import ObjectStore  # noqa: TC004

__all__ = ["JournalSettings"]


class JournalSettings(msgspec.Struct, frozen=True):
    """A journal's store and settings, handed down to its writers and readers.

    Attributes:
        store: The object store.
        policy: When writers checkpoint.
        blob_threshold: Encoded events larger than this become blobs.
        clock: Wall clock in seconds (lease expiry, ``committed_at``).
        compress: Compresses what writers store, or None.
        keyring: The data keys (encrypted objects are read through it), or None.
        encrypt: Whether writers encrypt what they store.
        signer: Signs a seal at every checkpoint, or None.
        index: The store's thread index, which writers register new threads
            in (None: they do not).
        log_spans: When checkpoints name log spans (see
            :data:`journal.checkpoint.LOG_SPANS`).
    """

    store: ObjectStore
    policy: CheckpointPolicy
    blob_threshold: int
    clock: Callable[[], float]
    compress: Callable[[bytes], bytes] | None
    keyring: Keyring | None = None
    encrypt: bool = False
    signer: Signer | None = None
    index: ThreadIndex | None = None
    log_spans: str = "dense"

    def log(self, key: ThreadKey) -> ThreadLog:
        """The :class:`ThreadLog` of ``key`` on this store.

        Raises:
            TypeError: ``key`` is not a ``ThreadKey``.
        """
        if not isinstance(key, ThreadKey):
            raise TypeError(f"expected a ThreadKey, not {type(key).__name__}")
        log = ThreadLog(
            self.store, key, self.compress, self.keyring, encrypt=self.encrypt
        )
        log.signer = self.signer
        log.index = self.index
        return log
