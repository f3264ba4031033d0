"""Journal and ThreadWriter: the public facade of journal mode."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from journal import codec
from journal import events as ev
from journal.checkpoint import (
    CheckpointPolicy,
    ChunkEncoder,
    decode_chunk,
    pack_chunk,
)
from journal.compression import compressor
from journal.engine.diff import diff_states
from journal.engine.lease import (
    LeaseRecord,
    LeaseState,
    acquire_lease,
    read_lease,
    write_lease,
)
from journal.engine.log import RetentionMarker, ThreadLog, checked_blob
from journal.errors import (
    CorruptRecordError,
    FencedError,
    JournalError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StaleStateError,
    StorageError,
    UnknownEventError,
    VersionConflictError,
)
from journal.keys import ThreadKey, decode_segment, encode_segment
from journal.layout import ThreadLayout, encode_hint, parse_hint
from projections.agent_state import (
    AgentState,
    AgentStateProjection,
    decode_state,
    encode_state,
)

if TYPE_CHECKING:
    from types import EllipsisType, TracebackType

    from journal.store import ObjectStore

__all__ = ["Finding", "Journal", "ThreadWriter", "VerifyReport"]

logger = logging.getLogger("journal")

Mutation = Callable[[AgentState], AgentState | None]

_READ_BATCH = 256
DEFAULT_RETENTION_WINDOW = 7 * 24 * 3600.0
"""Records are removed only once this many seconds old (far beyond any lease)."""
_TRANSIENT_RETRIES = 4
_CHUNK_SLICE = 64  # messages a background checkpoint encodes between two commits


@dataclass(slots=True)
class Finding:
    """One verify finding.

    Attributes:
        version: The version it concerns (None for thread-wide findings).
        message: What was found, readable.
    """

    version: int | None
    message: str

    def __str__(self) -> str:
        where = f"version {self.version}: " if self.version is not None else ""
        return where + self.message


@dataclass(slots=True)
class VerifyReport:
    """The result of :meth:`Journal.verify`.

    Attributes:
        key: The thread.
        ok: False when any problem was found.
        problems: Findings that mean data is missing, corrupt or inconsistent.
        warnings: Harmless findings (leftover temporary files, optional unknown
            events, a lagging hint).
        head: The highest contiguous version read.
        records: How many records were read.
        checkpoints: How many checkpoints were compared with a fresh replay.
        bytes: Total bytes of the records read.
    """

    key: ThreadKey
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    head: int = 0
    records: int = 0
    checkpoints: int = 0
    bytes: int = 0

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


@dataclass(slots=True)
class _Loaded:
    state: AgentState
    head: int
    head_hash: bytes
    checkpoint: int
    chunks: set[str]
    warnings: list[str]
    head_epoch: int = 0
    batches: dict[str, codec.Record] = field(default_factory=dict)


class Journal:
    """An event-sourced journal of agent threads on one object store.

    Args:
        store: The object store.
        checkpoint_every: Automatic checkpoint interval in records (0: off); a
            writer checkpoints at the first chunk boundary after it, and after
            twice it in any case (see ``CheckpointPolicy``).
        blob_threshold: Encoded events larger than this become blobs.
        clock: Wall clock in seconds (lease expiry, ``committed_at``).
        compression: ``"zstd"`` to have writers compress records and blobs (the
            ``zstd`` extra; see :mod:`journal.compression`), None not to. Readers
            read either, whatever this says.

    Raises:
        ValueError: An unknown ``compression``.
        CompressionUnavailableError: ``compression="zstd"`` without zstandard.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        checkpoint_every: int = 100,
        blob_threshold: int = codec.BLOB_THRESHOLD,
        clock: Callable[[], float] = time.time,
        compression: str | None = None,
    ) -> None:
        self.store = store
        self.policy = CheckpointPolicy(checkpoint_every)
        self.blob_threshold = blob_threshold
        self.clock = clock
        self.compression = compression
        self.compress = compressor(compression)

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str],
        *,
        checkpoint_every: int = 100,
        blob_threshold: int = codec.BLOB_THRESHOLD,
        compression: str | None = None,
        **storage_options: Any,
    ) -> Journal:
        """Open a journal at ``url``.

        Args:
            url: ``file:///path`` or a plain path, ``memory://name``,
                ``s3://bucket/prefix``, or another registered scheme.
            checkpoint_every: Automatic checkpoint interval in records (0: off).
            blob_threshold: Encoded events larger than this become blobs.
            compression: ``"zstd"`` to compress what writers store (see the class).
            **storage_options: Passed to the backend (``fsync=False`` locally;
                ``endpoint_url``, ``key``, ``secret``, ... for S3).
        """
        from stores.registry import open_store

        compressor(compression)  # refuse a bad setting before opening the store
        return cls(
            open_store(url, **storage_options),
            checkpoint_every=checkpoint_every,
            blob_threshold=blob_threshold,
            compression=compression,
        )

    async def aclose(self) -> None:
        """Release the store's connections."""
        await self.store.aclose()

    async def __aenter__(self) -> Journal:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _log(self, key: ThreadKey) -> ThreadLog:
        if not isinstance(key, ThreadKey):
            raise TypeError(f"expected a ThreadKey, not {type(key).__name__}")
        return ThreadLog(self.store, key, self.compress)

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
    ) -> _WriterContext:
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

        Raises:
            LeaseHeldError: Another holder's lease is live.
        """
        if not self.store.writable:
            raise StorageError(
                f"{self.store.url or type(self.store).__name__} is open read-only: "
                "its file system has no exclusive create, so it cannot carry a writer"
            )
        if lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, not {lease_ttl}")
        if wait < 0:
            raise ValueError(f"wait must be >= 0, not {wait}")
        return _WriterContext(
            self,
            key,
            holder or f"writer-{uuid.uuid4().hex[:12]}",
            lease_ttl,
            wait,
            list(fence_events),
            create_only,
            recover_runs,
        )

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
            # The fence we just wrote changes no state; anything else does.
            if w.base_version != state.version:
                raise StaleStateError(str(key), state.version, w.base_version)
            return await w.replace_state(state, reason=reason)

    async def checkpoint(self, key: ThreadKey) -> int:
        """Write a checkpoint at the thread's head; return its version.

        Takes no lease and commits no record: a checkpoint is derived data that
        readers verify against the log, created exclusively, so it can be written by
        any reader while a writer appends.

        Raises:
            ValueError: The thread has no records.
        """
        log = self._log(key)
        loaded = await self._rebuild(log, None)
        for warning in loaded.warnings:
            logger.warning("%s", warning)
        if loaded.head == 0:
            raise ValueError(f"{log.label} has no records to checkpoint")
        if loaded.checkpoint != loaded.head:
            state = loaded.state
            await _store_checkpoint(
                self,
                log,
                _Snapshot(
                    loaded.head,
                    loaded.head_hash,
                    encode_state(state.without_context()),
                    state.context,
                ),
                ChunkEncoder(),
                loaded.chunks,
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
        log = self._log(key)
        cutoff = self.clock() - window
        current = await log.read_retention()
        floor = current.checkpoint if current is not None else 1
        chosen: int | None = None
        for version in reversed(await log.checkpoint_versions()):
            if version <= floor:
                break
            try:
                _, body = await self._read_checkpoint(log, version)
                record = await log.read_parsed(version)
            except (
                ObjectNotFoundError,
                ValueError,
                CorruptRecordError,
                msgspec.DecodeError,
            ):
                continue
            if record.hash == body.record_hash and record.body.committed_at <= cutoff:
                chosen = version
                break
        if chosen is None:
            return None
        marker = RetentionMarker(chosen, chosen, self.clock())
        await self.store.replace(
            log.retention_key, msgspec.json.encode(marker), if_match=None
        )
        if await self._read_hint(log) < chosen:
            await self.store.replace(
                log.hint_key, encode_hint(chosen), if_match=None
            )
        # Checkpoints first: a reader that cannot find its old checkpoint looks up
        # the marker and starts from the retained one.
        for version in await log.checkpoint_versions():
            if version < chosen:
                await self.store.delete(log.checkpoint_key(version))
        for version in await log.versions():
            if version >= chosen:
                break
            await self.store.delete(log.record_key(version))
        return marker

    async def erase(
        self,
        *,
        user_id: str | EllipsisType | None = ...,
        session_id: str | None = None,
        agent_id: str | None = None,
        namespace: str | None = None,
    ) -> list[ThreadKey]:
        """Delete every object of the matching threads (erasure on request).

        At least ``user_id`` (None for the anonymous user) or ``session_id`` must be
        given. Stop the threads' writers first: a live writer would go on creating
        records in the erased thread. This cannot be undone.

        Returns:
            The threads erased.
        """
        if user_id is ... and session_id is None:
            raise ValueError("erase needs user_id or session_id")
        erased: list[ThreadKey] = []
        async for key in self.threads(namespace, agent_id, user_id, session_id):
            layout = ThreadLayout.of(key)
            for object_key in await self.store.list(layout.prefix + "/"):
                if object_key != layout.lease_key:
                    await self.store.delete(object_key)
            # The lease goes last, so a writer acquiring meanwhile still fences.
            await self.store.delete(layout.lease_key)
            erased.append(key)
        return erased

    # --- reading ---

    async def head(self, key: ThreadKey) -> int:
        """The thread's head version (0 for a thread with no records)."""
        log = self._log(key)
        hint = await self._read_hint(log)
        if hint:
            after = await log.versions(hint)
            if after:
                return after[-1]
            if await log.exists(hint):
                return hint
        versions = await log.versions()
        return versions[-1] if versions else 0

    async def load(self, key: ThreadKey, at_version: int | None = None) -> AgentState:
        """Rebuild the thread's state, at the head or as of ``at_version``.

        Reads the ``LAST_CHECKPOINT`` hint, the checkpoint, one listing after it and
        the tail records. A missing, stale, corrupt or foreign checkpoint is skipped
        with a warning (logged) and an earlier one or version 1 is used instead.

        Raises:
            ValueError: ``at_version`` is negative or beyond the head.
            CorruptRecordError: A record in the replayed range fails a check.
            UnknownEventError: The log holds a required event type this reader does
                not know.
        """
        loaded = await self._rebuild(self._log(key), at_version)
        for warning in loaded.warnings:
            logger.warning("%s", warning)
        return loaded.state

    async def load_with_warnings(
        self, key: ThreadKey, at_version: int | None = None
    ) -> tuple[AgentState, list[str]]:
        """Like :meth:`load`, also returning the warnings (skipped checkpoints)."""
        loaded = await self._rebuild(self._log(key), at_version)
        return loaded.state, loaded.warnings

    async def records(
        self, key: ThreadKey, start: int = 1, stop: int | None = None
    ) -> AsyncIterator[codec.Record]:
        """Yield decoded records with ``start <= version < stop``, in order.

        The hash chain is checked between consecutive records yielded.

        Raises:
            CorruptRecordError: A record fails a check or a version is missing.
        """
        log = self._log(key)
        start = max(start, 1)
        versions = [
            v for v in await log.versions(start - 1) if stop is None or v < stop
        ]
        expected = start
        prev: str | None = None
        for i in range(0, len(versions), _READ_BATCH):
            batch = versions[i : i + _READ_BATCH]
            for version in batch:
                if version != expected:
                    raise CorruptRecordError(log.label, expected, "record is missing")
                expected += 1
            for record in await log.materialize(await log.read_range(batch)):
                if prev is not None and record.prev_hash != prev:
                    raise CorruptRecordError(
                        log.label,
                        record.version,
                        "hash chain broken: prev_hash does not match the previous "
                        "record",
                    )
                prev = record.hash
                yield record

    async def threads(
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
        store = self.store

        async def level(
            prefix: str, value: str | None, anonymous: bool = False
        ) -> list[str]:
            if anonymous:
                return ["~"]
            if value is not None:
                return [encode_segment(value)]
            return await store.children(prefix)

        for ns in await level("", namespace):
            for agent in await level(ns, agent_id):
                users = await level(
                    f"{ns}/{agent}",
                    None if user_id is ... or user_id is None else user_id,
                    anonymous=user_id is None,
                )
                for user in users:
                    for session in await level(f"{ns}/{agent}/{user}", session_id):
                        base = f"{ns}/{agent}/{user}/{session}"
                        for thread in await store.children(base):
                            key = await self._key_from_segments(
                                (ns, agent, user, session, thread)
                            )
                            if key is not None:
                                yield key

    async def _key_from_segments(self, segments: tuple[str, ...]) -> ThreadKey | None:
        try:
            ids = [None if s == "~" else decode_segment(s) for s in segments]
        except ValueError:
            return None  # not something this journal wrote
        ns, agent, user, session, thread = ids
        if (
            ns is not None
            and agent is not None
            and session is not None
            and thread is not None
            and (user is not None or segments[2] == "~")
        ):
            return ThreadKey(agent, session, user, thread, ns)
        # A hashed long-form segment: the ids are in the thread's first record.
        prefix = "/".join(segments)
        try:
            data, _ = await self.store.read(ThreadLayout(prefix).record_key(1))
            record = codec.materialize(
                codec.parse_record(data, label=prefix, version=1), label=prefix
            )
        except (ObjectNotFoundError, CorruptRecordError):
            return None
        for event in record.events:
            if isinstance(event, ev.ThreadCreated):
                return ThreadKey(
                    event.agent_id,
                    event.session_id,
                    event.user_id,
                    event.thread_id,
                    event.namespace,
                )
        return None

    # --- rebuilding ---

    async def _read_hint(self, log: ThreadLog) -> int:
        try:
            data, _ = await self.store.read(log.hint_key)
        except ObjectNotFoundError:
            return 0
        return parse_hint(data)

    async def _read_checkpoint(
        self, log: ThreadLog, version: int
    ) -> tuple[AgentState, codec.CheckpointBody]:
        data, _ = await self.store.read(log.checkpoint_key(version))
        body = codec.decode_checkpoint(data)
        if body.version != version:
            raise ValueError(f"checkpoint file says version {body.version}")
        state = decode_state(body.state)
        chunks = await log.read_blobs(body.chunks) if body.chunks else {}
        # Decoding allocates one object per message and block, and nothing of it can
        # form a cycle: the cyclic GC would only rescan the growing context.
        with codec.gc_paused():
            for digest in body.chunks:
                state.context.extend(decode_chunk(chunks[digest]))
        if len(state.context) != body.message_count:
            raise ValueError(
                f"checkpoint holds {len(state.context)} messages, "
                f"expected {body.message_count}"
            )
        state.version = version
        return state, body

    async def _rebuild(self, log: ThreadLog, at_version: int | None) -> _Loaded:
        if at_version is not None and at_version < 0:
            raise ValueError(f"at_version must be >= 0, not {at_version}")
        warnings: list[str] = []
        projection = AgentStateProjection(log.label)
        tried: set[int] = set()
        hint = await self._read_hint(log)
        candidates: list[int] | None = None
        marker: RetentionMarker | None = None
        restarts = 0
        while True:
            # Pick the newest checkpoint at or below the target not yet refused.
            version = 0
            if (
                hint
                and hint not in tried
                and (at_version is None or hint <= at_version)
            ):
                version = hint
            else:
                if candidates is None:
                    # Off the fast path: only now is the retention marker worth a GET.
                    candidates = await log.checkpoint_versions()
                    marker = await log.read_retention()
                    if marker is not None:
                        if at_version is not None and at_version < marker.checkpoint:
                            raise ValueError(
                                f"{log.label}: history before version "
                                f"{marker.checkpoint} was removed by retention"
                            )
                        candidates = [c for c in candidates if c >= marker.checkpoint]
                usable = [
                    c
                    for c in candidates
                    if c not in tried and (at_version is None or c <= at_version)
                ]
                version = usable[-1] if usable else 0
            base: tuple[AgentState, codec.CheckpointBody] | None = None
            if version == 0:
                if marker is not None:
                    raise CorruptRecordError(
                        log.label,
                        marker.checkpoint,
                        "records before this version were removed by retention and "
                        "no usable checkpoint at or after it remains",
                    )
            else:
                tried.add(version)
                try:
                    base = await self._read_checkpoint(log, version)
                except ObjectNotFoundError:
                    warnings.append(
                        f"{log.label}: checkpoint {version} is missing; skipped"
                    )
                    continue
                except (ValueError, CorruptRecordError, msgspec.DecodeError) as exc:
                    warnings.append(
                        f"{log.label}: checkpoint {version} is corrupt ({exc}); skipped"
                    )
                    continue
            try:
                return await self._replay(log, projection, base, at_version, warnings)
            except _ForeignCheckpointError as exc:
                warnings.append(f"{log.label}: checkpoint {version} {exc}; skipped")
            except CorruptRecordError:
                # Retention may have removed records after we chose where to start:
                # start again from what it left, a bounded number of times.
                moved = await log.read_retention()
                if moved is None or moved.checkpoint <= version or restarts >= 3:
                    raise
                restarts += 1
                warnings.append(
                    f"{log.label}: records after version {version} were removed by "
                    f"retention while loading; restarting from version "
                    f"{moved.checkpoint}"
                )
                hint, candidates = await self._read_hint(log), None

    async def _replay(
        self,
        log: ThreadLog,
        projection: AgentStateProjection,
        base: tuple[AgentState, codec.CheckpointBody] | None,
        at_version: int | None,
        warnings: list[str],
    ) -> _Loaded:
        if base is None:
            state = projection.initial(log.key)
            start, prev_hash, chunks = 0, codec.GENESIS_HASH, set[str]()
        else:
            state, body = base
            start, prev_hash, chunks = body.version, body.record_hash, set(body.chunks)
        versions = await log.versions(start)
        if at_version is not None:
            versions = [v for v in versions if v <= at_version]
        head_epoch = 0
        if base is not None and not versions:
            # Nothing after the checkpoint: check the record it covers is ours.
            try:
                covered = await log.read_parsed(start)
            except ObjectNotFoundError:
                raise _ForeignCheckpointError(
                    "covers a record that is absent"
                ) from None
            if covered.hash != prev_hash:
                raise _ForeignCheckpointError("does not match the log's record hash")
            head_epoch = covered.body.epoch
        expected = start + 1
        for version in versions:
            if version != expected:
                raise CorruptRecordError(log.label, expected, "record is missing")
            expected += 1
        if at_version is not None and at_version > start + len(versions):
            raise ValueError(
                f"{log.label} has no version {at_version}; its head is "
                f"{start + len(versions)}"
            )
        apply = projection.apply
        batches: dict[str, codec.Record] = {}
        for i in range(0, len(versions), _READ_BATCH):
            parsed = await log.read_range(versions[i : i + _READ_BATCH])
            for p in parsed:
                if p.body.prev_hash != prev_hash:
                    if base is not None and p.body.version == start + 1:
                        raise _ForeignCheckpointError(
                            "does not match the log's record hash"
                        )
                    raise CorruptRecordError(
                        log.label,
                        p.body.version,
                        "hash chain broken: prev_hash does not match the previous "
                        "record",
                    )
                prev_hash = p.hash
            materialized = await log.materialize(parsed)
            with codec.gc_paused():
                for record in materialized:
                    for event in record.events:
                        state = apply(state, record, event)
                    state.version = record.version
                    head_epoch = record.epoch
                    batches[record.batch_id] = record
        return _Loaded(
            state,
            start + len(versions),
            prev_hash,
            start,
            chunks,
            warnings,
            head_epoch,
            batches,
        )

    # --- verify ---

    async def verify(self, key: ThreadKey) -> VerifyReport:
        """Check a thread's integrity without writing anything.

        Checks checksums, the hash chain, contiguity from version 1, epoch
        monotonicity, blobs, unknown event types, every checkpoint against a fresh
        replay, the ``LAST_CHECKPOINT`` hint, and leftovers of interrupted writes.
        """
        log = self._log(key)
        report = VerifyReport(key)
        versions = await log.versions()
        checkpoints = set(await log.checkpoint_versions())
        for leftover in await self.store.leftovers(log.prefix):
            report.warnings.append(
                Finding(
                    None, f"temporary file left by an interrupted write: {leftover}"
                )
            )
        projection = AgentStateProjection(log.label)
        state = projection.initial(key)
        prev_hash = codec.GENESIS_HASH
        max_epoch = 0
        expected = 1
        replay_ok = True
        present = set(versions)
        retained_from: codec.CheckpointBody | None = None
        try:
            marker = await log.read_retention()
        except CorruptRecordError as exc:
            report.problems.append(Finding(None, str(exc)))
            marker = None
        if marker is not None:
            # Records before the marker's checkpoint were removed on purpose: start
            # the replay from that checkpoint.
            expected = marker.checkpoint
            below = [v for v in versions if v < expected]
            if below:
                report.warnings.append(
                    Finding(
                        below[-1],
                        f"{len(below)} record(s) below the retention point "
                        f"{expected} remain (an interrupted retention)",
                    )
                )
            versions = [v for v in versions if v >= expected]
            checkpoints = {c for c in checkpoints if c >= expected}
            try:
                state, retained_from = await self._read_checkpoint(log, expected)
            except (
                ValueError,
                CorruptRecordError,
                ObjectNotFoundError,
                msgspec.DecodeError,
            ) as exc:
                report.problems.append(
                    Finding(
                        expected,
                        f"the checkpoint retention relies on is unusable: {exc}",
                    )
                )
                replay_ok = False
        checker = _CheckpointChecker()
        for i in range(0, len(versions), _READ_BATCH):
            batch = versions[i : i + _READ_BATCH]
            raw = await self.store.read_many([log.record_key(v) for v in batch])
            for version, data in zip(batch, raw, strict=True):
                while expected < version:
                    report.problems.append(Finding(expected, "record is missing"))
                    replay_ok = False
                    expected += 1
                expected = version + 1
                if data is None:
                    report.problems.append(
                        Finding(version, "record vanished while verifying")
                    )
                    replay_ok = False
                    continue
                report.records += 1
                report.bytes += len(data)
                try:
                    parsed = codec.parse_record(data, label=log.label, version=version)
                    record = await log.materialize_one(parsed)
                except CorruptRecordError as exc:
                    report.problems.append(Finding(version, str(exc)))
                    replay_ok = False
                    continue
                if retained_from is not None and version == retained_from.version:
                    # The first retained record: its predecessor is gone on purpose;
                    # the checkpoint vouches for it instead.
                    if parsed.hash != retained_from.record_hash:
                        report.problems.append(
                            Finding(
                                version,
                                "record does not match the checkpoint "
                                "retention relies on",
                            )
                        )
                    prev_hash = parsed.hash
                    max_epoch = record.epoch
                    continue
                if parsed.body.prev_hash != prev_hash and version - 1 in present:
                    report.problems.append(
                        Finding(
                            version,
                            "hash chain broken: prev_hash does not match "
                            f"version {version - 1}",
                        )
                    )
                prev_hash = parsed.hash
                if record.epoch < max_epoch:
                    report.problems.append(
                        Finding(
                            version,
                            f"epoch {record.epoch} is lower than the earlier "
                            f"epoch {max_epoch} (protocol violation)",
                        )
                    )
                max_epoch = max(max_epoch, record.epoch)
                for event in record.events:
                    if isinstance(event, ev.UnknownEvent):
                        finding = Finding(
                            version,
                            f"unknown {'required' if event.required else 'optional'} "
                            f"event type {event.type!r} (schema {event.schema})",
                        )
                        (report.problems if event.required else report.warnings).append(
                            finding
                        )
                if replay_ok:
                    try:
                        for event in record.events:
                            state = projection.apply(state, record, event)
                        state.version = version
                    except (UnknownEventError, ValueError) as exc:
                        replay_ok = False
                        report.warnings.append(
                            Finding(version, f"replay stopped: {exc}")
                        )
                if replay_ok and version in checkpoints:
                    await self._verify_checkpoint(
                        log, state, parsed.hash, report, checker
                    )
        report.head = expected - 1
        for version in sorted(checkpoints - present):
            report.problems.append(
                Finding(version, "checkpoint covers a version that is not in the log")
            )
        hint = await self._read_hint(log)
        if hint and hint not in checkpoints:
            report.warnings.append(
                Finding(hint, "LAST_CHECKPOINT points at a missing checkpoint")
            )
        return report

    async def _verify_checkpoint(
        self,
        log: ThreadLog,
        state: AgentState,
        record_hash: bytes,
        report: VerifyReport,
        checker: _CheckpointChecker,
    ) -> None:
        version = state.version
        report.checkpoints += 1
        try:
            data, _ = await self.store.read(log.checkpoint_key(version))
            body = codec.decode_checkpoint(data)
        except (ValueError, ObjectNotFoundError) as exc:
            report.problems.append(Finding(version, f"checkpoint is unreadable: {exc}"))
            return
        if body.version != version:
            report.problems.append(
                Finding(version, f"checkpoint file says version {body.version}")
            )
        elif body.record_hash != record_hash:
            report.problems.append(
                Finding(version, "checkpoint names a record hash that is not the log's")
            )
        elif body.state != encode_state(state.without_context()) or body.chunks != [
            digest for digest, _ in checker.encoder.chunk(state.context)
        ]:
            report.problems.append(
                Finding(version, "checkpoint differs from a fresh replay")
            )
        # Each chunk is shared by many checkpoints: check its bytes once.
        unchecked = [d for d in dict.fromkeys(body.chunks) if d not in checker.checked]
        if unchecked:
            raw = await self.store.read_many([log.blob_key(d) for d in unchecked])
            for digest, blob in zip(unchecked, raw, strict=True):
                if blob is None:
                    report.problems.append(
                        Finding(version, f"checkpoint chunk {digest} is missing")
                    )
                elif checked_blob(blob, digest) is None:
                    report.problems.append(
                        Finding(version, f"checkpoint chunk {digest} is corrupt")
                    )
                else:
                    checker.checked.add(digest)


@dataclass(slots=True)
class _CheckpointChecker:
    encoder: ChunkEncoder = field(default_factory=ChunkEncoder)
    checked: set[str] = field(default_factory=set)


class _ForeignCheckpointError(Exception):
    pass


@dataclass(slots=True)
class _Snapshot:
    """What a checkpoint needs, captured synchronously at a version."""

    version: int
    record_hash: bytes
    state: bytes
    messages: list[ev.Msg]  # a private shallow copy: the writer's context moves on


class _WriterContext:
    """``async with journal.writer(...) as w`` (or ``await ctx.acquire()``)."""

    def __init__(
        self,
        journal: Journal,
        key: ThreadKey,
        holder: str,
        ttl: float,
        wait: float,
        fence_events: list[object],
        create_only: bool,
        recover_runs: bool,
    ) -> None:
        self._args = (
            journal,
            key,
            holder,
            ttl,
            wait,
            fence_events,
            create_only,
            recover_runs,
        )
        self._writer: ThreadWriter | None = None

    async def acquire(self) -> ThreadWriter:
        journal, key, holder, ttl, wait, fence, create_only, recover = self._args
        writer = ThreadWriter(journal, key, holder, ttl)
        await writer._acquire(wait, fence, create_only, recover)
        self._writer = writer
        return writer

    async def __aenter__(self) -> ThreadWriter:
        return await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._writer is not None:
            await self._writer.close()


class ThreadWriter:
    """The single live writer of a thread, holding its lease.

    Obtain one with ``async with journal.writer(key) as w``. ``state`` and
    ``version`` are current after every append (the state object is updated in
    place). A writer that is fenced raises ``FencedError`` from every later append.
    """

    def __init__(self, journal: Journal, key: ThreadKey, holder: str, ttl: float):
        self.journal = journal
        self.key = key
        self.holder = holder
        self.ttl = ttl
        self.log = ThreadLog(journal.store, key, journal.compress)
        self.state: AgentState = AgentState()
        self.version = 0
        self.base_version = 0
        """The head before this writer's fence record."""
        self.epoch = 0
        self._head_hash = codec.GENESIS_HASH
        self._lease: LeaseState | None = None
        self._valid_until = 0.0
        self._fenced: FencedError | None = None
        self._closed = False
        self._renewer: asyncio.Task[None] | None = None
        self._checkpointer: asyncio.Task[None] | None = None
        self._last_checkpoint = 0
        self._chunks: set[str] = set()
        self._chunker = ChunkEncoder()  # state updates, on the event loop
        # Background checkpoints chunk on the loop, a slice at a time.
        self._checkpoint_chunker = ChunkEncoder()
        self._batches: dict[str, codec.Record] = {}
        # Steps a background checkpoint took, and how many the last append saw.
        self._checkpoint_steps = 0
        self._steps_seen = 0
        self._uncertain: dict[int, tuple[str, bytes]] = {}
        self._lock = asyncio.Lock()

    @property
    def label(self) -> str:
        """The thread's readable name."""
        return self.log.label

    # --- lease ---

    async def _acquire(
        self, wait: float, fence: list[object], create_only: bool, recover: bool
    ) -> None:
        journal = self.journal
        if create_only:
            # Refuse before touching LEASE; the check after the fence covers races.
            head = await journal.head(self.key)
            if head != 0:
                raise VersionConflictError(
                    self.label, 0, head, "the thread already exists"
                )
        for _ in range(8):
            self._lease = await acquire_lease(
                journal.store,
                self.log.lease_key,
                label=self.label,
                holder=self.holder,
                ttl=self.ttl,
                wait=wait,
                clock=journal.clock,
            )
            self.epoch = self._lease.record.epoch
            # Valid from when the lease was written, not from when waiting began.
            self._valid_until = self._lease.taken_at + self.ttl * 0.9
            try:
                loaded = await journal._rebuild(self.log, None)
                if loaded.head_epoch < self.epoch:
                    break
                # LEASE was lost or garbled and restarted below the log's epochs: the
                # fence must outrank every epoch already committed.
                now = journal.clock()
                bumped = LeaseRecord(
                    self.holder, loaded.head_epoch + 1, now + self.ttl, now
                )
                try:
                    etag = await write_lease(
                        journal.store, self.log.lease_key, bumped, self._lease.etag
                    )
                except (PreconditionFailedError, ObjectNotFoundError):
                    continue  # another writer moved the lease meanwhile: start over
                self._lease = LeaseState(bumped, etag, self._lease.taken_at)
                self.epoch = bumped.epoch
                break
            except BaseException:
                await self._release()
                raise
        else:
            raise StorageError(
                f"{self.label}: the lease kept changing during acquire", transient=True
            )
        try:
            for warning in loaded.warnings:
                logger.warning("%s", warning)
            self.state, self.version = loaded.state, loaded.head
            self._head_hash = loaded.head_hash
            self._last_checkpoint, self._chunks = loaded.checkpoint, loaded.chunks
            # Lets a restarted process's retry of a commit that landed before its
            # crash find it (within the records replayed since the checkpoint).
            self._batches = loaded.batches
            self.base_version = self.version
            if create_only and self.version != 0:
                raise VersionConflictError(
                    self.label, 0, self.version, "the thread already exists"
                )
            events: list[object] = []
            if self.version == 0:
                k = self.key
                events.append(
                    ev.ThreadCreated(
                        k.agent_id, k.session_id, k.user_id, k.thread_id, k.namespace
                    )
                )
            events.append(ev.LeaseAcquired(self.epoch, self.holder))
            if recover and self.state.active_run_id is not None:
                events.append(
                    ev.RunInterrupted(
                        self.state.active_run_id, reason="recovered", by="recovery"
                    )
                )
            events.extend(fence)
            await self._commit(events, None, None, None)
            if create_only and self.base_version != 0:
                raise VersionConflictError(
                    self.label, 0, self.base_version, "the thread already exists"
                )
        except BaseException:
            await self._release()
            raise
        self._renewer = asyncio.create_task(
            self._renew_loop(), name=f"lease-renewal {self.label}"
        )

    async def _renew_loop(self) -> None:
        interval = self.ttl / 2
        while not self._closed and self._fenced is None:
            await asyncio.sleep(interval)
            try:
                await self.renew()
            except FencedError:
                return
            except JournalError as exc:
                logger.warning("%s: lease renewal failed: %s", self.label, exc)
                interval = max(self.ttl / 10, 0.05)
            else:
                interval = self.ttl / 2

    async def renew(self) -> None:
        """Extend the lease now (the background task does this at half the TTL).

        Raises:
            FencedError: Another writer took the lease.
        """
        lease = self._lease
        if lease is None or self._closed:
            return
        started = time.monotonic()
        now = self.journal.clock()
        record = msgspec.structs.replace(lease.record, expires_at=now + self.ttl)
        try:
            etag = await write_lease(
                self.journal.store, self.log.lease_key, record, lease.etag
            )
        except (PreconditionFailedError, ObjectNotFoundError):
            current, etag = await read_lease(self.journal.store, self.log.lease_key)
            if (
                current is None
                or current.epoch != self.epoch
                or (current.holder != self.holder)
            ):
                self._fence(current.epoch if current else None, "lease was taken")
                raise self._fenced from None  # type: ignore[misc]
            etag = await write_lease(
                self.journal.store, self.log.lease_key, record, etag
            )
        self._lease = LeaseState(record, etag, started)
        self._valid_until = started + self.ttl * 0.9

    def _fence(self, epoch: int | None, detail: str) -> FencedError:
        if self._fenced is None:
            self._fenced = FencedError(self.label, self.epoch, epoch, detail)
        return self._fenced

    async def _release(self) -> None:
        lease = self._lease
        self._lease = None
        if lease is None or self._fenced is not None:
            return
        record = msgspec.structs.replace(lease.record, expires_at=self.journal.clock())
        with contextlib.suppress(JournalError):
            await write_lease(
                self.journal.store, self.log.lease_key, record, lease.etag
            )

    async def close(self) -> None:
        """Finish a pending checkpoint, stop renewing and release the lease.

        The epoch is kept, so the next writer fences at ``epoch + 1``.
        """
        if self._closed:
            return
        self._closed = True
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if self._checkpointer is not None:
            with contextlib.suppress(JournalError):
                await self._checkpointer
        await self._release()

    @property
    def fenced(self) -> bool:
        """Whether this writer lost its lease."""
        return self._fenced is not None

    # --- appending ---

    async def append(
        self,
        events: Iterable[object],
        *,
        expected_version: int | None = None,
        batch_id: str | None = None,
        run_id: str | None = None,
    ) -> codec.Record:
        """Commit ``events`` atomically as the next record.

        Args:
            events: One or more registered events.
            expected_version: If given, the head this append expects; a mismatch
                raises ``VersionConflictError`` and writes nothing.
            batch_id: Idempotency key. Retrying an append whose acknowledgement was
                lost with the same ``batch_id`` and events succeeds without writing.
            run_id: The run the record belongs to.

        Returns:
            The committed record.

        Raises:
            FencedError: A newer writer took over, or the lease could not be renewed
                in time; stop writing.
            VersionConflictError: ``expected_version`` is not the head, or the slot
                was taken by a commit this writer cannot accept.
            ValueError: ``batch_id`` was already used for different events, or no
                events were given.
        """
        batch = list(events)
        if not batch:
            raise ValueError("append needs at least one event")
        async with self._lock:
            before = self._checkpointer
            record = await self._commit(batch, batch_id, run_id, expected_version)
        task = self._checkpointer
        if task is not None and not task.done():
            # On a store whose calls never suspend (memory://) a loop of appends
            # would starve the background checkpoint forever: hand it a turn. Not
            # when it went on while this commit waited for its I/O, nor when this
            # commit started it (it runs during the next commit's I/O): either
            # would only add its work to this append's time.
            if task is before and self._checkpoint_steps == self._steps_seen:
                await asyncio.sleep(0)
            self._steps_seen = self._checkpoint_steps
        return record

    def _check_writable(self) -> None:
        if self._fenced is not None:
            raise self._fenced
        if self._closed or self._lease is None:
            raise FencedError(self.label, self.epoch, None, "the writer is closed")
        if time.monotonic() > self._valid_until:
            raise self._fence(
                None, "the lease could not be renewed before it could expire"
            )

    async def _commit(
        self,
        events: list[object],
        batch_id: str | None,
        run_id: str | None,
        expected_version: int | None,
        local_events: list[object] | None = None,
    ) -> codec.Record:
        self._check_writable()
        if batch_id is not None and batch_id in self._batches:
            done = self._batches[batch_id]
            probe = codec.encode_record(
                version=0,
                epoch=0,
                writer="",
                batch_id=batch_id,
                run_id=run_id,
                committed_at=0.0,
                prev_hash=codec.GENESIS_HASH,
                events=events,
                blob_threshold=self.journal.blob_threshold,
            )
            parsed = await self.log.read_parsed(done.version)
            if parsed.content_digest() != probe.content_digest:
                raise ValueError(
                    f"batch_id {batch_id!r} was already used for "
                    f"different events at version {done.version}"
                )
            return done
        if expected_version is not None and expected_version != self.version:
            raise VersionConflictError(self.label, expected_version, self.version)
        # 32 random hex digits, as uuid4().hex gives, at a sixth of its cost.
        batch = batch_id or os.urandom(16).hex()
        attempts = 0
        while True:
            version = self.version + 1
            committed_at = self.journal.clock()
            encoded = codec.encode_record(
                version=version,
                epoch=self.epoch,
                writer=self.holder,
                batch_id=batch,
                run_id=run_id,
                committed_at=committed_at,
                prev_hash=self._head_hash,
                events=events,
                blob_threshold=self.journal.blob_threshold,
                compress=self.journal.compress,
            )
            try:
                await self.log.publish(encoded, version)
            except ObjectExistsError:
                adopted = await self._taken(version, batch, encoded, expected_version)
                if adopted is not None:
                    return adopted
                continue
            except BaseException as exc:
                # The write may or may not have landed (an error, a lost reply, or a
                # cancellation mid-publish): remember it, so the slot is recognised as
                # ours whoever finds it next.
                self._uncertain[version] = (batch, encoded.content_digest)
                if not isinstance(exc, StorageError):
                    raise
                if exc.transient and attempts < _TRANSIENT_RETRIES:
                    attempts += 1
                    await asyncio.sleep(0.05 * 2**attempts)
                    continue
                raise
            self._uncertain.pop(version, None)
            record = codec.Record(
                version,
                self.epoch,
                self.holder,
                batch,
                run_id,
                committed_at,
                self._head_hash.hex(),
                encoded.hash.hex(),
                local_events if local_events is not None else events,
                len(encoded.data),
            )
            self._advance(record, encoded.hash)
            return record

    async def _taken(
        self,
        version: int,
        batch: str,
        encoded: codec.EncodedRecord,
        expected_version: int | None,
    ) -> codec.Record | None:
        """Decide what a taken slot means; return the record if it is ours."""
        parsed = await self.log.read_parsed(version)
        body = parsed.body
        ours = body.batch_id == batch or (
            self._uncertain.get(version, ("", b""))[0] == body.batch_id
        )
        if ours and body.epoch == self.epoch:
            if body.batch_id == batch and parsed.content_digest() != (
                encoded.content_digest
            ):
                raise ValueError(
                    f"{self.label} version {version} holds batch_id {batch!r} with "
                    "different events"
                )
            record = (await self.log.materialize([parsed]))[0]
            self._uncertain.pop(version, None)
            self._advance(record, parsed.hash)
            return record if body.batch_id == batch else None
        if body.epoch > self.epoch:
            raise self._fence(
                body.epoch, f"version {version} was committed at epoch {body.epoch}"
            )
        if body.epoch == self.epoch:
            raise VersionConflictError(
                self.label,
                version - 1,
                version,
                f"slot taken by another writer claiming epoch {body.epoch}",
            )
        # A lower epoch: a valid commit by a writer that was alive before our fence.
        if body.prev_hash != self._head_hash:
            raise CorruptRecordError(
                self.label, version, "hash chain broken at a slot found taken"
            )
        record = (await self.log.materialize([parsed]))[0]
        self._advance(record, parsed.hash)
        if expected_version is not None:
            raise VersionConflictError(self.label, expected_version, version)
        return None

    def _advance(self, record: codec.Record, digest: bytes) -> None:
        apply = AgentStateProjection(self.label).apply
        state = self.state
        for event in record.events:
            state = apply(state, record, event)
        state.version = record.version
        self.state = state
        self.version = record.version
        self._head_hash = digest
        self._batches[record.batch_id] = record
        if len(self._batches) > 1024:
            self._batches.pop(next(iter(self._batches)))
        if self.journal.policy.due(self.version, self._last_checkpoint, state.context):
            self._schedule_checkpoint()

    # --- checkpoints ---

    def _schedule_checkpoint(self) -> None:
        if self._checkpointer is not None and not self._checkpointer.done():
            return
        snapshot = self._snapshot()
        self._last_checkpoint = self.version
        self._checkpointer = asyncio.create_task(
            self._write_checkpoint(snapshot), name=f"checkpoint {self.label}"
        )
        self._checkpointer.add_done_callback(_log_task_failure)

    def _snapshot(self) -> _Snapshot:
        # Only cheap work here, on the commit path: the chunking happens later, a
        # slice at a time between commits, on a copy of the context's list.
        state = self.state
        return _Snapshot(
            self.version,
            self._head_hash,
            encode_state(state.without_context()),
            list(state.context),
        )

    async def _put_chunks(self, chunks: list[tuple[str, list[ev.Msg]]]) -> None:
        await _put_chunks(self.log, chunks, self._chunks, self._chunker.packed)

    async def _write_checkpoint(self, snap: _Snapshot) -> None:
        await _store_checkpoint(
            self.journal,
            self.log,
            snap,
            self._checkpoint_chunker,
            self._chunks,
            self._checkpoint_step,
        )

    def _checkpoint_step(self) -> None:
        self._checkpoint_steps += 1

    async def checkpoint(self) -> int:
        """Write a checkpoint at the current version now; return that version."""
        async with self._lock:
            self._check_writable()
            if self._checkpointer is not None:
                with contextlib.suppress(JournalError):
                    await self._checkpointer
            snapshot = self._snapshot()
            self._last_checkpoint = self.version
            await self._write_checkpoint(snapshot)
            return self.version

    # --- state changes ---

    async def update(
        self, reason: str, mutation: Mutation, *, run_id: str | None = None
    ) -> codec.Record | None:
        """Apply ``mutation`` to a deep copy of the state and commit the change.

        The change is committed as the specific events it amounts to where they
        exist (a new summary is a ``SummarySet``), else as one ``AgentStateReplaced``
        whose messages are stored as content-addressed chunks. Returns None (and
        commits nothing) when the mutation changed nothing.

        Raises:
            ValueError: The mutation changed the thread's identity, its runs or its
                pending tool calls (which only the log's events may change).
        """
        async with self._lock:
            self._check_writable()
            copy = self.state.copy()
            result = mutation(copy)
            new = copy if result is None else result
            if not isinstance(new, AgentState):
                raise TypeError(
                    f"mutation returned {type(new).__name__}, not an AgentState"
                )
            return await self._commit_state(new, reason, run_id)

    async def replace_state(
        self,
        state: AgentState,
        *,
        reason: str = "save",
        expected_version: int | None = None,
    ) -> codec.Record | None:
        """Commit ``state`` as the new state (as events where possible).

        Raises:
            StaleStateError: ``expected_version`` is given and is not the head.
        """
        async with self._lock:
            self._check_writable()
            if expected_version is not None and expected_version != self.version:
                raise StaleStateError(self.label, expected_version, self.version)
            new = state.copy()
            new.session_id, new.thread_id, new.user_id = (
                self.state.session_id,
                self.state.thread_id,
                self.state.user_id,
            )
            new.active_run_id = self.state.active_run_id
            new.tool_context.pending_calls = self.state.tool_context.pending_calls
            return await self._commit_state(new, reason, None)

    async def _commit_state(
        self, new: AgentState, reason: str, run_id: str | None
    ) -> codec.Record | None:
        events = diff_states(self.state, new)
        if events is None:
            chunks = self._chunker.chunk(new.context)
            await self._put_chunks(chunks)
            bare = encode_state(new.without_context())
            wire: list[object] = [
                ev.AgentStateReplaced(reason, bare, chunks=[d for d, _ in chunks])
            ]
            local: list[object] = [
                ev.AgentStateReplaced(reason, bare, messages=list(new.context))
            ]
            return await self._commit(wire, None, run_id, None, local)
        if not events:
            return None
        return await self._commit(events, None, run_id, None)

    async def clear_context(self, reason: str = "") -> codec.Record:
        """Commit ``ContextCleared``: messages and summary go, the rest stays."""
        return await self.append([ev.ContextCleared(reason)])

    async def __aenter__(self) -> ThreadWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _put_chunks(
    log: ThreadLog,
    chunks: list[tuple[str, list[ev.Msg]]],
    written: set[str],
    packed: dict[str, bytes],
) -> None:
    """Write the chunks not in ``written`` (and add them to it).

    ``packed`` holds the bytes of chunks the chunker already encoded.
    """
    fresh = [
        (d, packed.get(d) or pack_chunk(m)[1]) for d, m in chunks if d not in written
    ]
    await log.put_blobs(fresh)
    written.update(d for d, _ in fresh)


async def _plan_chunks(
    chunker: ChunkEncoder,
    messages: list[ev.Msg],
    written: set[str],
    step: Callable[[], None] | None = None,
) -> tuple[list[str], list[tuple[str, bytes]]]:
    """Chunk ``messages``: all digests, and the bytes of those not yet written.

    On the event loop, a slice of :data:`_CHUNK_SLICE` messages at a time, so that
    commits go on in between (a slice takes well under a millisecond). A worker
    thread would gain nothing, since encoding holds the GIL, and releasing the GIL
    often enough for commits costs more than the encoding (``time.sleep(0)`` takes
    80 µs on the machines we measured).
    """
    steps = chunker.chunk_steps(messages, _CHUNK_SLICE)
    while True:
        if step is not None:
            step()
        try:
            next(steps)
        except StopIteration as done:
            chunks: list[tuple[str, list[ev.Msg]]] = done.value
            break
        await asyncio.sleep(0)
    fresh = [
        (d, chunker.packed.get(d) or pack_chunk(m)[1])
        for d, m in chunks
        if d not in written
    ]
    return [d for d, _ in chunks], fresh


async def _store_checkpoint(
    journal: Journal,
    log: ThreadLog,
    snap: _Snapshot,
    chunker: ChunkEncoder,
    written: set[str],
    step: Callable[[], None] | None = None,
) -> None:
    """Write a checkpoint's new chunks, the checkpoint, then the hint.

    ``step`` is called each time the work resumes (the writer counts them).
    """
    digests, fresh = await _plan_chunks(chunker, snap.messages, written, step)
    await log.put_blobs(fresh)
    if step is not None:
        step()
    written.update(d for d, _ in fresh)
    body = codec.CheckpointBody(
        codec.FORMAT_VERSION,
        snap.version,
        snap.record_hash,
        journal.clock(),
        snap.state,
        digests,
        len(snap.messages),
    )
    with contextlib.suppress(ObjectExistsError):
        await journal.store.create(
            log.checkpoint_key(snap.version), codec.encode_checkpoint(body)
        )
    await journal.store.put_hint(log.hint_key, encode_hint(snap.version))


def _log_task_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("background checkpoint failed: %s", task.exception())
