"""The :class:`Journal`: the public facade of journal mode.

It opens a store by URL and hands each thread's work to the rooms below it: writers
(:mod:`journal.engine.writer`), rebuilding (:mod:`journal.engine.replay`), checking
(:mod:`journal.engine.verify`), retention (:mod:`journal.engine.retention`) and
listing (:mod:`journal.engine.listing`). None of those calls back up into it.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from journal import codec
from journal.checkpoint import CheckpointPolicy, ChunkEncoder, check_log_spans
from journal.compression import compressor
from journal.crypto import Encryption, KeyProvider, require_crypto
from journal.engine.checkpoints import (
    LogRefs,
    Snapshot,
    flush_stored_checkpoint,
    store_checkpoint,
)
from journal.engine.listing import (
    NOT_THREAD,
    list_threads,
    name_threads,
    thread_paths,
    thread_pattern,
    walk_threads,
)
from journal.engine.log import erase_durable, erase_thread
from journal.engine.replay import rebuild
from journal.engine.retention import DEFAULT_RETENTION_WINDOW, retain
from journal.engine.settings import JournalSettings
from journal.engine.thread_index import ThreadIndex
from journal.errors import StaleStateError, StorageError
from journal.keyring import Keyring, owner_of
from journal.keys import ThreadKey
from journal.layout import ThreadLayout
from journal.lazy import lazy_logger
from journal.seals import Signer
from projections.agent_state import encode_state

if TYPE_CHECKING:
    import os
    from collections.abc import AsyncIterator, Callable, Sequence
    from types import EllipsisType

    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from journal.engine.log import RetentionMarker, ThreadLog
    from journal.engine.verify import VerifyReport
    from journal.engine.writer import ThreadWriter, WriterContext
    from journal.seals import Seal
    from journal.store import ObjectStore
    from projections.agent_state import AgentState

__all__ = ["Journal"]

logger = lazy_logger("journal")


class Journal:
    """An event-sourced journal of agent threads on one object store.

    Args:
        store: The object store.
        checkpoint_every: Automatic checkpoint interval in records (0: off); a
            writer checkpoints at the first chunk boundary after it, and after
            four times it in any case (see ``CheckpointPolicy``).
        blob_threshold: Encoded events larger than this become blobs.
        clock: Wall clock in seconds (lease expiry, ``committed_at``).
        compression: ``"zstd"`` to have writers compress records and blobs (the
            ``zstd`` extra; see :mod:`journal.compression`), None not to. Readers
            read either, whatever this says.
        encryption: A key provider (or an :class:`~journal.crypto.Encryption`) to
            encrypt what writers store and to read encrypted data (the ``crypto``
            extra; see ``docs/ENCRYPTION.md``). None: write in the clear; encrypted
            data then reads as locked (``KeyUnavailableError``), or erased.
        signing_key: An Ed25519 private key (or a PEM file / raw 32 bytes): a
            seal is signed at every checkpoint (see :mod:`journal.seals`).
        log_spans: Whether a checkpoint names the records that hold a chunk's
            messages (a log span) instead of copying them into a blob:
            ``"dense"`` (the default: on local segment files, for threads of up
            to 1,024 records that add two messages or more each), ``"never"`` or
            ``"always"`` (see :data:`journal.checkpoint.LOG_SPANS`). Readers read
            either, whatever this says.

    Raises:
        ValueError: An unknown ``compression`` or ``log_spans``.
        CompressionUnavailableError: ``compression="zstd"`` without zstandard.
        EncryptionError: ``encryption`` or ``signing_key`` without cryptography.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        checkpoint_every: int = 100,
        blob_threshold: int = codec.BLOB_THRESHOLD,
        clock: Callable[[], float] = time.time,
        compression: str | None = None,
        encryption: KeyProvider | Encryption | None = None,
        signing_key: Ed25519PrivateKey | str | os.PathLike[str] | bytes | None = None,
        log_spans: str = "dense",
    ) -> None:
        self.store = store
        self.log_spans = check_log_spans(log_spans)
        self.policy = CheckpointPolicy(checkpoint_every)
        self.blob_threshold = blob_threshold
        self.clock = clock
        self.compression = compression
        self.compress = compressor(compression)
        if encryption is not None and not isinstance(encryption, Encryption):
            encryption = Encryption(encryption)
        if encryption is not None:
            require_crypto()
        self.encryption = encryption
        self.keyring = Keyring(
            (encryption.keyring if encryption is not None else None) or store,
            encryption.provider if encryption is not None else None,
            clock,
        )
        self.signer = Signer(signing_key) if signing_key is not None else None
        self.settings = JournalSettings(
            store,
            self.policy,
            blob_threshold,
            clock,
            self.compress,
            self.keyring,
            encryption is not None,
            self.signer,
            ThreadIndex(store),
            self.log_spans,
        )

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str],
        *,
        checkpoint_every: int = 100,
        blob_threshold: int = codec.BLOB_THRESHOLD,
        compression: str | None = None,
        encryption: KeyProvider | Encryption | None = None,
        signing_key: Ed25519PrivateKey | str | os.PathLike[str] | bytes | None = None,
        log_spans: str = "dense",
        **storage_options: Any,
    ) -> Journal:
        """Open a journal at ``url``.

        Args:
            url: ``file:///path`` or a plain path, ``memory://name``,
                ``s3://bucket/prefix``, or another registered scheme.
            checkpoint_every: Automatic checkpoint interval in records (0: off).
            blob_threshold: Encoded events larger than this become blobs.
            compression: ``"zstd"`` to compress what writers store (see the class).
            encryption: A key provider: encrypt at rest (see the class).
            signing_key: Sign a seal at every checkpoint (see the class).
            log_spans: When checkpoints name log spans (see the class).
            **storage_options: Passed to the backend (``fsync=False`` locally;
                ``endpoint_url``, ``key``, ``secret``, ... for S3).
        """
        from stores.registry import open_store

        compressor(compression)  # refuse a bad setting before opening the store
        check_log_spans(log_spans)
        return cls(
            open_store(url, **storage_options),
            checkpoint_every=checkpoint_every,
            blob_threshold=blob_threshold,
            compression=compression,
            encryption=encryption,
            signing_key=signing_key,
            log_spans=log_spans,
        )

    async def aclose(self) -> None:
        """Release the store's connections."""
        await self.store.aclose()

    async def __aenter__(self) -> Journal:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _log(self, key: ThreadKey) -> ThreadLog:
        return self.settings.log(key)

    # --- writing ---

    def writer(
        self,
        key: ThreadKey,
        holder: str | None = None,
        *,
        lease_ttl: float = 30.0,
        wait: float = 0.0,
        fence_events: Sequence[object] = (),
        create_only: bool = False,
        recover_runs: bool = True,
        defer_fence: bool = False,
    ) -> WriterContext:
        """Acquire the thread's writer lease; use as ``async with``.

        Args:
            key: The thread.
            holder: Our holder id (default: a new unique id). The same holder may
                take over its own unexpired lease.
            lease_ttl: Lease duration in seconds; renewed in the background at half.
            wait: Seconds to wait for another holder's lease (0: fail at once).
            fence_events: Extra events committed in the same record as the fence.
            create_only: Refuse (``VersionConflictError``) if the thread exists.
            recover_runs: Record ``RunInterrupted(by="recovery")`` for a run the
                previous writer left unfinished, in the fence record.
            defer_fence: Carry the fence in the writer's first record instead of
                its own (see ``WriterOptions.defer_fence``).

        Raises:
            LeaseHeldError: Another holder's lease is live.
        """
        if not self.store.writable:
            raise StorageError(
                f"{self.store.url or type(self.store).__name__} is open read-only: "
                "its file system has no exclusive create, so it cannot carry a writer"
            )
        # Imported here: the writer's module loads asyncio, which a process that
        # only reads (a cold CLI command) does without.
        from journal.engine.writer import WriterContext, WriterOptions

        options = WriterOptions(
            holder or f"writer-{uuid.uuid4().hex[:12]}",
            lease_ttl,
            wait,
            tuple(fence_events),
            create_only,
            recover_runs,
            defer_fence,
        )
        return WriterContext(self.settings, key, options)

    async def acquire(
        self,
        key: ThreadKey,
        holder: str | None = None,
        *,
        lease_ttl: float = 30.0,
        wait: float = 0.0,
        fence_events: Sequence[object] = (),
        create_only: bool = False,
        recover_runs: bool = True,
        defer_fence: bool = False,
    ) -> ThreadWriter:
        """Acquire a writer without a context manager; ``close()`` it when done."""
        return await self.writer(
            key,
            holder,
            lease_ttl=lease_ttl,
            wait=wait,
            fence_events=fence_events,
            create_only=create_only,
            recover_runs=recover_runs,
            defer_fence=defer_fence,
        ).acquire()

    async def save_state(
        self,
        key: ThreadKey,
        state: AgentState,
        *,
        reason: str = "save",
        holder: str | None = None,
        lease_ttl: float = 30.0,
        wait: float = 0.0,
    ) -> codec.Record | None:
        """Commit ``state`` as the thread's new state if it is still current.

        Raises:
            StaleStateError: ``state.version`` is no longer the thread's head.
            LeaseHeldError: Another writer holds the lease.
        """
        head = await self.head(key)
        if state.version != head:
            raise StaleStateError(str(key), state.version, head)
        async with self.writer(key, holder, lease_ttl=lease_ttl, wait=wait) as w:
            # The fence we just wrote changes no state; anything else does: a
            # previous holder's commit met on the fence's way (taken in before
            # it) as much as one found at the rebuild.
            before_fence = w.version - 1
            if w.base_version != state.version or before_fence != state.version:
                raise StaleStateError(str(key), state.version, before_fence)
            return await w.replace_state(state, reason=reason)

    async def checkpoint(self, key: ThreadKey) -> int:
        """Write a checkpoint at the thread's head; return its version.

        Takes no lease and commits no record: a checkpoint is derived data that
        readers verify against the log, created exclusively, so it can be written by
        any reader while a writer appends. Durable when this returns, with what it
        names: the checkpoint found at the head already (a background one, not
        synced) is flushed, and one found there that cannot be read whole is
        replaced.

        Raises:
            ValueError: The thread has no records.
        """
        log = self._log(key)
        refs = LogRefs.of(self.log_spans, log.store)
        loaded = await rebuild(log, None, window=True, refs=refs)
        for warning in loaded.warnings:
            logger.warning("%s", warning)
        if loaded.head == 0:
            raise ValueError(f"{log.label} has no records to checkpoint")
        if loaded.checkpoint == loaded.head:
            # Checkpointed already, perhaps in the background: not synced then.
            await flush_stored_checkpoint(log, loaded.head)
        else:
            state = loaded.state
            await store_checkpoint(
                log,
                Snapshot(
                    loaded.head,
                    loaded.head_hash,
                    encode_state(state.without_context()),
                    state.context,
                    loaded.window.pack() if loaded.window is not None else b"",
                ),
                ChunkEncoder(),
                loaded.chunks,
                self.clock,
                durable=True,  # asked for: it should outlast a power cut
                refs=refs,
            )
        return loaded.head

    # --- retention and erasure ---

    async def retain(
        self,
        key: ThreadKey,
        *,
        window: float = DEFAULT_RETENTION_WINDOW,
    ) -> RetentionMarker | None:
        """Remove records (and checkpoints) covered by an old enough checkpoint.

        Picks the newest valid checkpoint whose record was committed more than
        ``window`` seconds ago, writes the ``RETENTION`` marker naming it (so that
        ``verify`` tells retention from loss), moves the ``LAST_CHECKPOINT`` hint up to
        it, then deletes older checkpoints and records. The window must be far longer
        than any lease TTL: a writer paused since before a takeover could otherwise
        refill a removed slot. Content-addressed blobs are kept (they may be shared
        with newer checkpoints). Takes no lease.

        Returns:
            The marker written, or None when nothing old enough can be removed.

        Raises:
            ValueError: ``window`` is negative.
        """
        if window < 0:
            raise ValueError(f"window must be >= 0, not {window}")
        now = self.clock()
        return await retain(self._log(key), cutoff=now - window, now=now)

    async def erase(
        self,
        *,
        user_id: str | EllipsisType | None = ...,
        session_id: str | None = None,
        agent_id: str | None = None,
        namespace: str | None = None,
    ) -> list[ThreadKey]:
        """Erase the matching threads: shred their data keys, then delete them.

        At least ``user_id`` (None for the anonymous user) or ``session_id`` must be
        given. The threads' durable turns go first: their queued inputs (which are
        not encrypted) and cursors, also of a thread that has queued turns but no
        record yet. Then :meth:`shred` (every copy of encrypted data becomes
        unreadable), then every object of the threads is deleted, by path: a
        thread whose ids cannot be read (a long id hashed in its path, its first
        record gone) is deleted too, with a warning, and is not returned. Stop the
        threads' writers and durable workers first: a live writer would go on
        creating records in the erased thread. This cannot be undone.

        Returns:
            The threads erased.
        """
        if user_id is ... and session_id is None:
            raise ValueError("erase needs user_id or session_id")
        pattern = thread_pattern(namespace, agent_id, user_id, session_id)
        paths = await thread_paths(self.store, pattern, self.settings.index)
        # Named first: a thread with ids too long for its path is named by its
        # first record, which the shredding makes unreadable.
        keys = await name_threads(self.store, paths, self.keyring)
        # The durable turns first: a worker must find no queued input to run
        # (which would start the thread again), and inputs are not encrypted.
        await erase_durable(self.store, pattern)
        await self.shred(
            user_id=user_id,
            session_id=session_id,
            agent_id=agent_id,
            namespace=namespace,
        )
        erased: list[ThreadKey] = []
        for segments, key in zip(paths, keys, strict=True):
            if key is NOT_THREAD:
                continue
            if isinstance(key, ThreadKey):
                erased.append(key)
                await self._log(key).erase()
                continue
            # The filters selected its path, so it is erased all the same.
            prefix = "/".join(segments)
            logger.warning(
                "%s: erased a thread whose ids could not be read (its path hashes "
                "an id too long for it, and its first record is gone or cannot be "
                "decrypted); it is not among the threads returned",
                prefix,
            )
            await erase_thread(self.store, ThreadLayout(prefix))
        return erased

    async def shred(
        self,
        *,
        user_id: str | EllipsisType | None = ...,
        session_id: str | None = None,
        agent_id: str | None = None,
        namespace: str | None = None,
    ) -> list[str]:
        """Destroy the data keys of the matching owners (crypto-shredding).

        Whatever those keys encrypted (records, checkpoints, blobs, in every copy:
        old object versions, backups) becomes unreadable at once, and reads report
        ``ErasedError`` rather than corruption. The objects stay until
        :meth:`erase` deletes them. Keys are per user of an agent and per session
        of the anonymous user: a session of a named user is not shredded alone
        (its user's key covers the user's other sessions); erase deletes it.

        Returns:
            The owners whose keys were destroyed.
        """
        if user_id is ... and session_id is None:
            raise ValueError("shred needs user_id or session_id")
        owners = [
            owner
            for owner in await self.keyring.owners()
            if _owner_matches(owner, user_id, session_id, agent_id, namespace)
        ]
        return [owner for owner in owners if await self.keyring.shred(owner)]

    async def rotate_keys(self) -> int:
        """Rewrap every data key with the provider's current key-encryption key.

        No record is rewritten: only the key objects. Afterwards the older KEKs can
        be retired (``KeyFile.retire``), which also makes any copy of a key object
        wrapped by them (a backup of the keyring) useless.

        A key object that cannot be rotated (another owner's copy, one that does
        not decode or names a malformed id, one whose data keys no KEK of the
        provider unwraps, one that kept changing) is left as it is, the others
        are rotated, and then :class:`KeyRotationIncompleteError` names it.

        Returns:
            How many key objects were rewritten.

        Raises:
            KeyRotationIncompleteError: Key objects were left as they were; deal
                with them before retiring the older KEKs.
        """
        return await self.keyring.rotate()

    def owner_of(self, key: ThreadKey) -> str:
        """Whose data keys encrypt ``key``'s thread (as errors name the owner)."""
        return owner_of(ThreadLayout.of(key).prefix)

    # --- seals ---

    async def seal(self, key: ThreadKey) -> Seal:
        """Sign and store a seal of the thread's head now (on demand).

        The records the seal vouches for are checked first: from this key's latest
        seal (the history must extend it) or, without one, from the first record
        kept (see :func:`journal.engine.sealing.sealable_head`).

        Raises:
            ValueError: The journal has no signing key, or the thread no records.
            CorruptRecordError: A record to be vouched for is missing or damaged,
                the chain is broken, or the history no longer extends this key's
                latest seal; nothing is signed.
        """
        if self.signer is None:
            raise ValueError("sealing needs a journal opened with signing_key=")
        log = self._log(key)
        head = await log.head()
        if head == 0:
            raise ValueError(f"{log.label} has no records to seal")
        from journal.engine.sealing import latest_seal, sealable_head, write_seal

        own = await latest_seal(log, self.signer.public_key)
        version, digest = await sealable_head(log, own, await self.first_version(key))
        return await write_seal(log, self.signer, version, digest, self.clock)

    async def latest_seal(
        self, key: ThreadKey, trusted: Ed25519PublicKey | None = None
    ) -> Seal | None:
        """The thread's seal of the highest version (signed by ``trusted``, if given).

        Print it (``journal.seals.encode_seal``) and keep it elsewhere: passed back
        to :meth:`verify` as ``anchor``, it catches a truncation to before it.
        """
        from journal.engine.sealing import latest_seal

        return await latest_seal(self._log(key), trusted)

    # --- reading ---

    async def head(self, key: ThreadKey) -> int:
        """The thread's head version (0 for a thread with no records)."""
        return await self._log(key).head()

    async def first_version(self, key: ThreadKey) -> int:
        """The lowest version kept: 1, or where retention left the log to start.

        With :meth:`head`, the thread holds ``head - first_version + 1`` records
        (none when the head is 0).

        Raises:
            CorruptRecordError: The ``RETENTION`` marker does not decode.
        """
        marker = await self._log(key).read_retention()
        return 1 if marker is None else marker.first_retained

    async def load(
        self, key: ThreadKey, at_version: int | None = None, *, messages: bool = True
    ) -> AgentState:
        """Rebuild the thread's state, at the head or as of ``at_version``.

        Reads the ``LAST_CHECKPOINT`` hint, the checkpoint, one listing after it and
        the tail records. A missing, stale, corrupt or foreign checkpoint is skipped
        with a warning (logged) and an earlier one or version 1 is used instead.

        ``messages=False`` returns the state without its context (an empty
        ``context``; everything else as a full load gives it): the checkpoint's
        message chunks are then neither read nor checked, which on a long thread
        is most of a load's work. For a look at runs, pending tool calls, tasks,
        permissions or plan mode; a missing or damaged chunk goes unnoticed
        (``verify`` reports it; a full load skips the checkpoint).

        Raises:
            ValueError: ``at_version`` is negative or beyond the head.
            CorruptRecordError: A record in the replayed range fails a check.
            UnknownEventError: The log holds a required event type this reader does
                not know.
        """
        loaded = await rebuild(self._log(key), at_version, messages=messages)
        for warning in loaded.warnings:
            logger.warning("%s", warning)
        return loaded.state

    async def load_with_warnings(
        self, key: ThreadKey, at_version: int | None = None, *, messages: bool = True
    ) -> tuple[AgentState, list[str]]:
        """Like :meth:`load`, also returning the warnings (skipped checkpoints)."""
        loaded = await rebuild(self._log(key), at_version, messages=messages)
        return loaded.state, loaded.warnings

    async def records(
        self, key: ThreadKey, start: int = 1, stop: int | None = None
    ) -> AsyncIterator[codec.Record]:
        """Yield decoded records with ``start <= version < stop``, in order.

        The hash chain is checked between consecutive records yielded. Records
        removed by retention are not missing: from below :meth:`first_version`,
        the records yielded begin there.

        Raises:
            CorruptRecordError: A record fails a check or a version is missing
                (or the ``RETENTION`` marker does not decode).
        """
        log = self._log(key)
        start = max(start, 1)
        versions = [
            v for v in await log.versions(start - 1) if stop is None or v < stop
        ]
        if versions and versions[0] > start:
            # Only a log that does not begin where asked pays for the marker.
            marker = await log.read_retention()
            if marker is not None and marker.first_retained > start:
                start = marker.first_retained
                versions = [v for v in versions if v >= start]
        async for parsed in log.scan(versions, after=start - 1, prev_hash=None):
            for record in await log.materialize(parsed):
                yield record

    def threads(
        self,
        namespace: str | None = None,
        agent_id: str | None = None,
        user_id: str | EllipsisType | None = ...,
        session_id: str | None = None,
    ) -> AsyncIterator[ThreadKey]:
        """Yield the keys of the threads stored, filtered by the given ids.

        ``user_id=None`` selects the anonymous user; leave it out for every user.
        Lists directories level by level (never the whole store).
        """
        return list_threads(
            self.store,
            namespace,
            agent_id,
            user_id,
            session_id,
            self.keyring,
            self.settings.index,
        )

    async def index_threads(self) -> int:
        """Register every thread of the store in its index, then mark it complete.

        A store created by this version lists its threads from the index (one
        listing of ``~threads/``) from the start. One whose threads were created
        before the index existed, or copied in by hand, lists by walking its
        directories until this has run once. Writers may run meanwhile: a thread
        created while this walks registers itself.

        Returns:
            How many entries this call created.
        """
        index = self.settings.index
        assert index is not None  # noqa: S101 - every Journal has one
        return await index.build(await walk_threads(self.store))

    # --- verify ---

    async def verify(
        self,
        key: ThreadKey,
        *,
        trust: Ed25519PublicKey | None = None,
        anchor: Seal | None = None,
    ) -> VerifyReport:
        """Check a thread's integrity without writing anything.

        Checks checksums, the hash chain, contiguity from version 1, epoch
        monotonicity, blobs, unknown event types, every checkpoint against a fresh
        replay, the ``LAST_CHECKPOINT`` hint, the ``LEASE`` (damaged or implausible:
        a warning), and leftovers of interrupted writes. Encrypted records are
        checked as stored without their key (``report.encryption`` says
        ``"locked"`` or ``"erased"``) and in full with it.

        Args:
            key: The thread.
            trust: An Ed25519 public key (``journal.seals.load_public_key``): the
                history must extend the last seal it signed.
            anchor: A seal kept elsewhere that the history must extend too.
        """
        # Imported here, as sealing is: a process that only reads or writes
        # never loads the verifier (a cold command starts a few ms sooner).
        from journal.engine.verify import verify_thread

        return await verify_thread(
            self._log(key), self.clock, trust=trust, anchor=anchor
        )


def _owner_matches(
    owner: str,
    user_id: str | EllipsisType | None,
    session_id: str | None,
    agent_id: str | None,
    namespace: str | None,
) -> bool:
    """Whether an owner's keys belong only to threads the erase filter selects."""
    from journal.keys import ANONYMOUS_SEGMENT, encode_segment

    parts = owner.split("/")
    if namespace is not None and parts[0] != encode_segment(namespace):
        return False
    if agent_id is not None and parts[1] != encode_segment(agent_id):
        return False
    anonymous = parts[2] == ANONYMOUS_SEGMENT
    if user_id is None and not anonymous:
        return False
    if isinstance(user_id, str) and (anonymous or parts[2] != encode_segment(user_id)):
        return False
    if session_id is not None:
        # A named user's key covers all their sessions: never shredded for one.
        return anonymous and len(parts) > 3 and parts[3] == encode_segment(session_id)
    return True
