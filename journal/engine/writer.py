"""The single live writer of a thread: lease, fence, commits and checkpoints.

A :class:`ThreadWriter` takes the thread's ``LEASE`` at the next epoch, rebuilds the
state, and commits a ``LeaseAcquired`` fence record; from then on every append is an
exclusive create of the next version, and a slot found taken is read before anything
is decided (see :mod:`journal.engine.lease` for why a stale writer cannot
interleave). The lease is renewed in the background at half its TTL; checkpoints are
written in the background on the journal's policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from journal import codec
from journal import events as ev
from journal.checkpoint import ChunkEncoder, decode_chunk
from journal.engine.batches import DIGEST_SIZE, BatchWindow
from journal.engine.checkpoints import LogRefs, Snapshot, put_chunks, store_checkpoint
from journal.engine.diff import diff_states
from journal.engine.lease import RELEASED_EXPIRY, LeaseRecord, LeaseState
from journal.engine.replay import rebuild
from journal.errors import (
    CorruptRecordError,
    FencedError,
    InvalidEventError,
    JournalError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StaleStateError,
    StorageError,
    VersionConflictError,
)
from journal.lazy import lazy_logger
from journal.loopless import pause
from projections.agent_state import (
    AgentState,
    AgentStateProjection,
    encode_state,
    fold_refusal,
    keep_log_facts,
)

if TYPE_CHECKING:
    from types import TracebackType

    from journal.engine.settings import JournalSettings
    from journal.keys import ThreadKey

__all__ = ["LEFTOVER_AGE", "Mutation", "ThreadWriter", "WriterContext", "WriterOptions"]

logger = lazy_logger("journal")

Mutation = Callable[[AgentState], AgentState | None]
"""A state change for :meth:`ThreadWriter.update`: edit in place or return anew."""

_TRANSIENT_RETRIES = 4
# How many times the fence is worked out again after records met on its way.
_FENCE_ATTEMPTS = 64
LEFTOVER_AGE = 3600.0
"""Temporary files of interrupted writes older than this (seconds) are removed by
the next writer, after its fence (a younger one may be a reader's checkpoint)."""


@dataclass(frozen=True, slots=True)
class WriterOptions:
    """How a writer takes and holds a thread (see ``Journal.writer``).

    Attributes:
        holder: Our holder id; the same holder may take over its own live lease.
        lease_ttl: Lease duration in seconds; renewed in the background at half.
        wait: Seconds to wait for another holder's lease (0: fail at once).
        fence_events: Extra events committed in the same record as the fence.
        create_only: Refuse (``VersionConflictError``) if the thread exists.
        recover_runs: Record ``RunInterrupted(by="recovery")`` for a run the
            previous writer left unfinished, in the fence record.
        defer_fence: Commit the fence (``LeaseAcquired``, and ``ThreadCreated`` for
            a new thread) in the writer's first record instead of a record of its
            own, so a writer that commits nothing writes nothing to the log. Not
            when the fence record has something to say at once (a recovered run,
            ``fence_events``, ``create_only``). A ``batch_id`` retried by a later
            writer matches a first record's events without the fence before them.
    """

    holder: str
    lease_ttl: float = 30.0
    wait: float = 0.0
    fence_events: tuple[object, ...] = ()
    create_only: bool = False
    recover_runs: bool = True
    defer_fence: bool = False

    def __post_init__(self) -> None:
        if self.lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, not {self.lease_ttl}")
        if self.wait < 0:
            raise ValueError(f"wait must be >= 0, not {self.wait}")


class WriterContext:
    """``async with journal.writer(...) as w`` (or ``await ctx.acquire()``)."""

    def __init__(
        self, settings: JournalSettings, key: ThreadKey, options: WriterOptions
    ) -> None:
        self._settings = settings
        self._key = key
        self._options = options
        self._writer: ThreadWriter | None = None

    async def acquire(self) -> ThreadWriter:
        """Acquire the writer; the caller must ``close()`` it."""
        writer = ThreadWriter(self._settings, self._key, self._options)
        await writer._acquire()
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

    def __init__(
        self, settings: JournalSettings, key: ThreadKey, options: WriterOptions
    ) -> None:
        self.settings = settings
        self.key = key
        self.options = options
        self.holder = options.holder
        self.ttl = options.lease_ttl
        self.log = settings.log(key)
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
        # Where the context's messages came from, so that checkpoints name the
        # records holding them instead of copying them (stores that read their
        # logs in bulk only).
        self._refs = LogRefs.of(settings.log_spans, self.log.store)
        self._chunker = ChunkEncoder()  # state updates, on the event loop
        # Background checkpoints chunk on the loop, a slice at a time.
        self._checkpoint_chunker = ChunkEncoder()
        self._window = BatchWindow()
        self._apply = AgentStateProjection(self.log.label).apply  # for each record
        # Steps a background checkpoint took, and how many the last append saw.
        self._checkpoint_steps = 0
        self._steps_seen = 0
        # The batches this writer published at each version not yet settled: a
        # record found there under one of them is ours, whatever the replies said.
        self._attempted: dict[int, set[str]] = {}
        self._lock = asyncio.Lock()
        # Every write of LEASE (renewal, idle marks, release) swaps one etag.
        self._lease_lock = asyncio.Lock()
        # The fence events a deferred fence adds to the first record.
        self._fence_pending: list[object] = []
        # The release of the lease, once started (see _release).
        self._releasing: asyncio.Task[None] | None = None

    @property
    def label(self) -> str:
        """The thread's readable name."""
        return self.log.label

    # --- lease ---

    async def _acquire(self) -> None:
        """Take the lease, rebuild the state and commit the fence record.

        Called once, by :class:`WriterContext`. If taking the lease and rebuilding
        took half the TTL or more, the lease is renewed on the same epoch before the
        fence is committed (nothing is written at that epoch yet, so this is safe);
        if another holder took it meanwhile, acquiring starts over, which waits for
        that holder or raises ``LeaseHeldError``.

        Raises:
            LeaseHeldError: Another holder's lease is live.
            VersionConflictError: ``create_only`` and the thread exists.
        """
        options = self.options
        create_only, wait = options.create_only, options.wait
        if create_only:
            # Refuse before touching LEASE; the check after the fence covers races.
            head = await self.log.head()
            if head != 0:
                raise VersionConflictError(
                    self.label, 0, head, "the thread already exists"
                )
        for _ in range(8):
            self._lease = await self.log.acquire_lease(
                holder=self.holder,
                ttl=self.ttl,
                wait=wait,
                clock=self.settings.clock,
            )
            self.epoch = self._lease.record.epoch
            # Valid from when the lease was written, not from when waiting began.
            self._valid_until = self._lease.taken_at + self.ttl * 0.9
            try:
                self._refs = LogRefs.of(self.settings.log_spans, self.log.store)
                if self.log.encrypt and self.log.cipher is not None:
                    # The owner's keys as they are now, before rebuilding: keys
                    # this process still caches may have been destroyed elsewhere,
                    # and a thread rebuilt from them is one no one else can read.
                    await self.log.cipher.writable()
                loaded = await rebuild(self.log, None, window=True, refs=self._refs)
                if loaded.head_epoch >= self.epoch:
                    # LEASE was lost or damaged and restarted below the log's
                    # epochs: the fence must outrank every epoch already committed.
                    now = self.settings.clock()
                    epoch = loaded.head_epoch + 1
                    bumped = LeaseRecord(
                        self.holder, epoch, now + self.ttl, now, self.ttl
                    )
                    try:
                        etag = await self.log.write_lease(bumped, self._lease.etag)
                    except (PreconditionFailedError, ObjectNotFoundError):
                        continue  # another writer moved the lease meanwhile: start over
                    self._lease = LeaseState(bumped, etag, self._lease.taken_at)
                    self.epoch = bumped.epoch
                if await self._keep_for_fence(self._lease):
                    break
                # Another holder took the lease while we rebuilt (it had expired):
                # look again, which waits for it or raises LeaseHeldError.
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
            # What a writer that did not sync (fsync=False on this directory) left
            # is made durable before this one builds on it; such a writer flags
            # the thread first, for the next one that syncs.
            await self.log.store.make_durable(self.log.prefix)
            await self.log.store.mark_unsynced(self.log.prefix)
            if loaded.head:
                # The head may be a dead writer's, written but never synced: what
                # this writer builds on must be durable, and its own records may
                # go to another file (the next segment) whose syncs do not cover it.
                await self.log.store.flush([self.log.record_key(loaded.head)])
            self.state, self.version = loaded.state, loaded.head
            self._head_hash = loaded.head_hash
            self._last_checkpoint, self._chunks = loaded.checkpoint, loaded.chunks
            # Lets a restarted process's retry of a commit that landed before its
            # crash find it, however far back the checkpoint replay started from.
            if loaded.window is not None:
                self._window = loaded.window
            self.base_version = self.version
            if create_only and self.version != 0:
                raise VersionConflictError(
                    self.label, 0, self.version, "the thread already exists"
                )
            await self._commit_fence()
        except BaseException:
            await self._release()
            raise
        # Every earlier writer is fenced now: their temporary files are writes
        # that were never acknowledged, and would pile up crash after crash.
        try:
            await self.log.remove_leftovers(LEFTOVER_AGE)
        except JournalError as exc:
            logger.warning("%s: could not remove leftovers: %s", self.label, exc)
        self._renewer = asyncio.create_task(
            self._renew_loop(), name=f"lease-renewal {self.label}"
        )

    async def _commit_fence(self) -> None:
        """Commit the fence record, or defer it to the first record.

        The fence is committed as the sequel of the state it was worked out from
        (``expected_version``): a previous holder may commit records between the
        rebuild and the fence (a zombie of our holder id, or a writer whose lease
        expired), and the fence must not recover a run they completed, leave
        alone a run they started, or create a thread they created. The records
        met are taken in and the fence worked out again on the state they make.

        Raises:
            VersionConflictError: ``create_only``, and a record was found at
                version 1 (a racing writer created the thread).
            StorageError: Records kept landing before the fence (transient).
        """
        options = self.options
        recover = options.recover_runs and self.state.active_run_id is not None
        if (
            options.defer_fence
            and not recover
            and not options.fence_events
            and not options.create_only
        ):
            self._fence_pending = self._fence_events(recover=False)
            return
        for _ in range(_FENCE_ATTEMPTS):
            seen = self.version
            recover = options.recover_runs and self.state.active_run_id is not None
            try:
                await self._commit(self._fence_events(recover), None, None, seen)
            except VersionConflictError as exc:
                if self.version == seen:
                    raise
                if options.create_only:
                    # Any record there is another writer's creation of the thread.
                    raise VersionConflictError(
                        self.label, 0, self.version, "the thread already exists"
                    ) from exc
                continue
            return
        raise StorageError(
            f"{self.label}: a previous writer's records kept landing before the fence",
            transient=True,
        )

    def _fence_events(self, recover: bool) -> list[object]:
        """The fence's events, as the state taken in so far makes them."""
        events: list[object] = []
        if self.version == 0:
            k = self.key
            events.append(
                ev.ThreadCreated(
                    k.agent_id, k.session_id, k.user_id, k.thread_id, k.namespace
                )
            )
        events.append(ev.LeaseAcquired(self.epoch, self.holder))
        run_id = self.state.active_run_id
        if recover and run_id is not None:
            events.append(ev.RunInterrupted(run_id, reason="recovered", by="recovery"))
        events.extend(self.options.fence_events)
        return events

    async def _renew_loop(self) -> None:
        # Half a TTL after the lease was last written, not after the fence landed.
        lease = self._lease
        taken_at = lease.taken_at if lease is not None else time.monotonic()
        interval = max(0.0, taken_at + self.ttl / 2 - time.monotonic())
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
        lost, epoch = await self._extend_lease(lease)
        if lost:
            raise self._fence(epoch, "lease was taken")

    async def _extend_lease(
        self, lease: LeaseState, idle: bool | None = None
    ) -> tuple[bool, int | None]:
        """CAS the lease to a fresh expiry at our epoch (and ``idle``, if given).

        Returns:
            ``(False, None)`` when extended; ``(True, epoch)`` when another holder
            has the lease (``epoch`` is what ``LEASE`` holds now, None if gone).
        """
        async with self._lease_lock:
            # A concurrent write (renewal, idle mark) may have swapped the etag.
            lease = self._lease or lease
            return await self._swap_lease(lease, idle)

    async def _swap_lease(
        self, lease: LeaseState, idle: bool | None
    ) -> tuple[bool, int | None]:
        started = time.monotonic()
        now = self.settings.clock()
        record = msgspec.structs.replace(
            lease.record,
            expires_at=now + self.ttl,
            ttl=self.ttl,
            idle=lease.record.idle if idle is None else idle,
        )
        try:
            # Our own lease at our own epoch: a sync would only make a renewal or
            # an idle mark outlast a power cut that also ends this writer.
            etag = await self.log.write_lease(record, lease.etag, durable=False)
        except (PreconditionFailedError, ObjectNotFoundError):
            current, etag = await self.log.read_lease()
            if not self._ours(current, lease):
                return True, current.epoch if current else None
            # Still ours: our own earlier write landed and its reply was lost.
            etag = await self.log.write_lease(record, etag, durable=False)
        self._lease = LeaseState(record, etag, started)
        self._valid_until = started + self.ttl * 0.9
        return False, None

    def _ours(self, current: LeaseRecord | None, lease: LeaseState) -> bool:
        """Whether ``current`` (LEASE as read) is still this acquisition's lease."""
        return (
            current is not None
            and current.holder == self.holder
            and current.epoch == self.epoch
            # The same holder and epoch granted again (LEASE lost meanwhile): a
            # renewal keeps acquired_at, another acquisition sets its own.
            and current.acquired_at == lease.record.acquired_at
        )

    async def _keep_for_fence(self, lease: LeaseState) -> bool:
        """Renew before the fence if acquiring took half the TTL or more.

        Nothing is written at our epoch yet, so extending the lease on the same
        epoch is safe: the CAS fails if anyone moved ``LEASE`` since we wrote it,
        and then the lease is theirs (False).
        """
        if time.monotonic() - lease.taken_at < self.ttl / 2:
            return True
        lost, _ = await self._extend_lease(lease)
        return not lost

    def _fence(self, epoch: int | None, detail: str) -> FencedError:
        if self._fenced is None:
            self._fenced = FencedError(self.label, self.epoch, epoch, detail)
        return self._fenced

    async def _release(self) -> None:
        """Release the lease, once, finishing even if the caller is cancelled.

        The release runs as a task of its own, shielded: a caller cancelled while
        it runs (a ``close()`` under a timeout) does not leave the lease held, and
        a later ``close()`` waits for the same release instead of returning early.
        """
        if self._releasing is None:
            lease, self._lease = self._lease, None
            if lease is None:
                return
            self._releasing = asyncio.create_task(
                self._release_lease(lease), name=f"lease-release {self.label}"
            )
        await asyncio.shield(self._releasing)

    async def _release_lease(self, lease: LeaseState) -> None:
        fenced = self._fenced
        if fenced is not None and fenced.current_epoch not in (None, self.epoch):
            return  # a later epoch holds LEASE: nothing of ours to release
        if fenced is None and lease.record.idle:
            # An idle lease is free to take already: releasing it would add a PUT.
            return
        # Expired at 0.0, not at "now" by our clock, which would keep out a holder
        # whose clock is behind ours (or ours after a step back). Not marked idle:
        # readers that predate the flag would find the checksum wrong, and take
        # every closed thread's lease for damaged. The epoch stays, so the next
        # writer fences above it.
        record = msgspec.structs.replace(lease.record, expires_at=RELEASED_EXPIRY)
        async with self._lease_lock:
            with contextlib.suppress(JournalError):
                if fenced is None:
                    try:
                        await self.log.write_lease(record, lease.etag, durable=False)
                    except PreconditionFailedError:
                        pass  # looked at below
                    else:
                        return
                # A write of ours may have landed with its reply lost (a renewal,
                # an idle mark, one cancelled mid-flight by close), or this
                # writer fenced itself (an idle mark that failed, its lease timed
                # out here) while LEASE stayed its own: if LEASE is still this
                # acquisition's and busy, release it at its etag, or it stays
                # busy until its ttl runs out.
                current, etag = await self.log.read_lease()
                busy = (
                    current is not None
                    and not current.idle
                    and current.expires_at != RELEASED_EXPIRY
                )
                if busy and self._ours(current, lease):
                    await self.log.write_lease(record, etag, durable=False)

    async def set_idle(self, idle: bool) -> bool:
        """Mark the lease idle (takeable by anyone) or busy again, renewing it.

        An idle writer keeps its state and epoch between operations. Marking it
        busy again succeeds only while no one took the lease meanwhile; then no
        one committed either, so its state is still the thread's.

        Returns:
            Whether the lease is still ours (False: the writer is fenced now).
        """
        lease = self._lease
        if lease is None or self._closed or self._fenced is not None:
            return False
        try:
            lost, epoch = await self._extend_lease(lease, idle)
        except JournalError as exc:
            # Unknown whether the swap landed: the lease cannot be trusted.
            self._fence(None, f"marking the lease failed: {exc}")
            return False
        if lost:
            self._fence(epoch, "lease was taken while idle")
            return False
        return True

    @property
    def idle(self) -> bool:
        """Whether the lease is marked idle (see :meth:`set_idle`)."""
        return self._lease is not None and self._lease.record.idle

    @property
    def lease_valid(self) -> bool:
        """Whether this writer can still commit: open, not fenced, lease in time."""
        return (
            not self._closed
            and self._fenced is None
            and self._lease is not None
            and time.monotonic() <= self._valid_until
        )

    async def close(self) -> None:
        """Take a due checkpoint, stop renewing and release the lease.

        A checkpoint due by the record count alone (``checkpoint_every`` records
        since the last one) is taken now, without waiting for the chunk boundary
        an open writer waits for: a closed thread's next reader would otherwise
        replay those records on every load until a writer came back. A
        checkpoint already running is finished. The lease is released (its
        expiry set to 0.0, so any holder takes it at once whatever its clock)
        even when ``close()`` is cancelled meanwhile; a later ``close()`` waits
        for that release. A writer that stopped itself (its lease timed out
        here, an idle mark failed) releases the lease too while it is still this
        writer's. The epoch is kept, so the next writer fences at ``epoch + 1``.
        """
        if self._closed:
            # A close cancelled earlier: finish (or wait for) its release.
            await self._release()
            return
        self._closed = True
        try:
            if self._renewer is not None:
                self._renewer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._renewer
            if self._fenced is None and self.settings.policy.due(
                self.version, self._last_checkpoint
            ):
                self._schedule_checkpoint()
            if self._checkpointer is not None:
                # Derived data: however the background checkpoint ended (failed,
                # or its task cancelled), closing goes on; its done callback
                # logged it.
                await asyncio.wait([self._checkpointer])
        finally:
            # Even when close() is cancelled while waiting above: a lease left
            # busy would keep every other holder out until its ttl runs out.
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
            batch_id: Idempotency key (not empty). Retrying an append whose
                acknowledgement was lost with the same ``batch_id`` and events
                returns the record it committed, without writing, in this process
                or another, while fewer than
                :data:`~journal.engine.batches.IDEMPOTENCY_WINDOW` (256) records
                were committed after it (this writer's fence included); after
                that the batch id is forgotten and the append commits anew. When
                retention removed the original record, the record returned has
                its version, batch id, the given events and ``run_id`` only
                (epoch 0, empty writer and hashes).
            run_id: The run the record belongs to.

        Returns:
            The committed record.

        Raises:
            FencedError: A newer writer took over, or the lease could not be renewed
                in time; stop writing.
            VersionConflictError: ``expected_version`` is not the head, or the slot
                was taken by a commit this writer cannot accept.
            InvalidEventError: An event readers would refuse (its message names
                the event, the field and the value's type; see
                ``codec.encode_record``). Nothing is committed and the writer stays
                usable. A ``ValueError``.
            ValueError: ``batch_id`` was already used for different events (the
                message names it and the version), no events were given, or
                ``batch_id`` / ``run_id`` is empty or longer than
                ``codec.MAX_ID_LENGTH`` characters.
            TypeError: ``batch_id`` or ``run_id`` is not a string.
        """
        _check_id("batch_id", batch_id)
        _check_id("run_id", run_id)
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
                await pause()
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
        if batch_id is not None:
            # append refused an empty one: it would be replaced by a generated id.
            done = await self._retried(batch_id, events, run_id)
            if done is not None:
                return done
        if expected_version is not None and expected_version != self.version:
            raise VersionConflictError(self.label, expected_version, self.version)
        if local_events is not None:
            _refuse_unfoldable(local_events)
        # 32 random hex digits, as uuid4().hex gives, at a sixth of its cost.
        batch = batch_id or os.urandom(16).hex()
        attempts = 0
        while True:
            # A deferred fence as it stands at this attempt: a record taken in on
            # the way (our own first record, landed unseen) may have carried it,
            # and a previous holder's may have created the thread.
            wire, local = events, local_events
            if self._fence_pending:
                wire = [*self._fence_pending, *events]
                if local_events is not None:
                    local = [*self._fence_pending, *local_events]
            version = self.version + 1
            committed_at = self.settings.clock()
            encoded = codec.encode_record(
                version=version,
                epoch=self.epoch,
                writer=self.holder,
                batch_id=batch,
                run_id=run_id,
                committed_at=committed_at,
                prev_hash=self._head_hash,
                events=wire,
                blob_threshold=self.settings.blob_threshold,
                compress=self.settings.compress,
            )
            if local_events is None and encoded.events is not None:
                # As readers decode them (an UnknownEvent naming a known type is
                # that type to them), after the fence this attempt put first.
                _refuse_unfoldable(encoded.events[len(wire) - len(events) :])
            # Remembered before the write, not after a failure: a reply lost then
            # a failed read of the slot, or a later attempt at the same version,
            # must not make a record that landed look like another writer's.
            self._attempted.setdefault(version, set()).add(batch)
            try:
                await self.log.publish(encoded, version)
            except ObjectExistsError:
                adopted = await self._taken(version, batch, encoded, expected_version)
                if adopted is not None:
                    return adopted
                if batch_id is not None:
                    # Records taken in on the way may hold this batch: a retry
                    # whose original landed after this writer rebuilt (one that
                    # deferred its fence has no fence of its own to stop it).
                    done = await self._retried(batch_id, events, run_id)
                    if done is not None:
                        return done
                continue
            except BaseException as exc:
                # The write may or may not have landed (an error, a lost reply, or a
                # cancellation mid-publish): ``_attempted`` keeps it, so the slot is
                # recognised as ours whoever finds it next.
                if not isinstance(exc, StorageError):
                    raise
                if exc.transient and attempts < _TRANSIENT_RETRIES:
                    attempts += 1
                    await asyncio.sleep(0.05 * 2**attempts)
                    continue
                raise
            self._attempted.pop(version, None)
            if local is None:
                # What readers will decode: the writer's state is then exactly a
                # reader's (a tuple is a list in both) and shares nothing mutable
                # with the caller's events.
                local = encoded.events if encoded.events is not None else wire
            record = codec.Record(
                version,
                self.epoch,
                self.holder,
                batch,
                run_id,
                committed_at,
                self._head_hash.hex(),
                encoded.hash.hex(),
                local,
                len(encoded.data),
            )
            self._advance(record, encoded.hash, encoded.content_digest)
            return record

    async def _retried(
        self, batch_id: str, events: list[object], run_id: str | None
    ) -> codec.Record | None:
        """The record a retry of ``batch_id`` already committed, if in the window.

        Raises:
            ValueError: That record holds different events.
        """
        found = self._window.find(batch_id)
        if found is None:
            return None
        version, short_digest = found
        probe = codec.encode_record(
            version=0,
            epoch=0,
            writer="",
            batch_id=batch_id,
            run_id=run_id,
            committed_at=0.0,
            prev_hash=codec.GENESIS_HASH,
            events=events,
            blob_threshold=self.settings.blob_threshold,
        )
        try:
            parsed = await self.log.read_parsed(version)
        except ObjectNotFoundError:
            parsed = None  # removed by retention: the window's digest must do
        if parsed is not None:
            if parsed.body.batch_id != batch_id:
                return None  # another batch id with the same short key
            same = parsed.content_digest() == probe.content_digest
            fence = parsed.fence_events()
            if not same and fence:
                # A writer that deferred its fence committed it with this batch:
                # its events are the batch's without the fence before them.
                same = parsed.content_digest(fence) == probe.content_digest
        else:
            same = probe.content_digest[:DIGEST_SIZE] == short_digest
        if not same:
            raise ValueError(
                f"batch_id {batch_id!r} was already used for "
                f"different events at version {version}"
            )
        if parsed is not None:
            return (await self.log.materialize([parsed]))[0]
        # What is known of a removed record: its version, its batch and (equal to
        # these, by the digest) its events.
        return codec.Record(version, 0, "", batch_id, run_id, 0.0, "", "", events)

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
        # Found, not written by this attempt: perhaps never synced (a writer that
        # died before its sync, on a store whose failed appends stay readable).
        # Acknowledged or built on, it must be durable first.
        await self.log.store.flush([self.log.record_key(version)])
        # Ours only by batch: the holder id does not tell, since one epoch can be
        # granted twice, to the same holder id too (LEASE lost while a writer whose
        # fence is deferred had committed nothing at its epoch).
        ours = body.batch_id == batch or body.batch_id in self._attempted.get(
            version, ()
        )
        if ours and body.epoch == self.epoch:
            if body.prev_hash != self._head_hash:
                raise CorruptRecordError(
                    self.label, version, "hash chain broken at a slot found taken"
                )
            if body.batch_id == batch and parsed.content_digest() != (
                encoded.content_digest
            ):
                raise ValueError(
                    f"{self.label} version {version} holds batch_id {batch!r} with "
                    "different events"
                )
            record = (await self.log.materialize([parsed]))[0]
            self._attempted.pop(version, None)
            self._advance(record, parsed.hash, parsed.content_digest())
            if body.batch_id == batch:
                return record
            if expected_version is not None:
                # An earlier commit of ours that landed unseen: the head moved.
                raise VersionConflictError(self.label, expected_version, version)
            return None
        if body.epoch > self.epoch:
            raise self._fence(
                body.epoch, f"version {version} was committed at epoch {body.epoch}"
            )
        if body.epoch == self.epoch:
            # Our epoch was granted to another writer too, and its record came
            # first: building on it would interleave two writers at one epoch.
            raise self._fence(
                body.epoch,
                f"version {version} was committed at this writer's epoch "
                f"{body.epoch} by another writer ({body.writer!r}): the epoch was "
                "granted twice (LEASE lost or damaged while this writer lived)",
            )
        # A lower epoch: a valid commit by a writer that was alive before our fence.
        if body.prev_hash != self._head_hash:
            raise CorruptRecordError(
                self.label, version, "hash chain broken at a slot found taken"
            )
        record = (await self.log.materialize([parsed]))[0]
        self._attempted.pop(version, None)  # none of ours landed there
        self._advance(record, parsed.hash, parsed.content_digest())
        if expected_version is not None:
            raise VersionConflictError(self.label, expected_version, version)
        return None

    def _advance(
        self, record: codec.Record, digest: bytes, content_digest: bytes
    ) -> None:
        apply = self._apply
        state = self.state
        before = state.context
        length = len(before)
        for event in record.events:
            state = apply(state, record, event)
        state.version = record.version
        self.state = state
        refs = self._refs
        if refs is not None and record.version <= refs.max_version:
            # Past max_version no checkpoint names a new span: nothing to learn.
            refs.provenance.observe_fold(record, before, length, state.context)
        self.version = record.version
        self._head_hash = digest
        if record.epoch == self.epoch:
            self._fence_pending = []  # it travelled in this record
        elif self._fence_pending:
            # A previous holder's record, taken in before our deferred fence: a
            # thread it created must not be created again by our first record.
            self._fence_pending = self._fence_events(recover=False)
        self._window.add(record.version, record.batch_id, content_digest)
        if self.settings.policy.due(self.version, self._last_checkpoint, state.context):
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

    def _snapshot(self) -> Snapshot:
        # Only cheap work here, on the commit path: the chunking happens later, a
        # slice at a time between commits, on a copy of the context's list.
        state = self.state
        return Snapshot(
            self.version,
            self._head_hash,
            encode_state(state.without_context()),
            list(state.context),
            self._window.pack(),
        )

    async def _put_chunks(self, chunks: list[tuple[str, list[ev.Msg]]]) -> None:
        await put_chunks(self.log, chunks, self._chunks, self._chunker.packed)

    async def _write_checkpoint(self, snap: Snapshot, *, durable: bool = False) -> None:
        await store_checkpoint(
            self.log,
            snap,
            self._checkpoint_chunker,
            self._chunks,
            self.settings.clock,
            self._checkpoint_step,
            durable=durable,
            refs=self._refs,
        )

    def _checkpoint_step(self) -> None:
        self._checkpoint_steps += 1

    async def checkpoint(self) -> int:
        """Write a checkpoint at the current version now; return that version.

        Unlike the ones written in the background (not synced: derived data), the
        checkpoint asked for is durable when this returns.
        """
        async with self._lock:
            self._check_writable()
            if self._checkpointer is not None:
                await asyncio.wait([self._checkpointer])
            snapshot = self._snapshot()
            self._last_checkpoint = self.version
            await self._write_checkpoint(snapshot, durable=True)
            return self.version

    # --- state changes ---

    async def update(
        self, reason: str, mutation: Mutation, *, run_id: str | None = None
    ) -> codec.Record | None:
        """Apply ``mutation`` to a deep copy of the state and commit the change.

        The change is committed as the specific events it amounts to where they
        exist (a new summary is a ``SummarySet``), else as one ``AgentStateReplaced``
        whose messages are stored as content-addressed chunks. Returns None (and
        commits nothing) when the mutation changed nothing. Should the commit meet
        records this writer had not seen (a previous holder's, committed after a
        takeover whose fence was deferred), they are taken in and ``mutation``
        runs again on the state they make, so that their changes stay.

        Raises:
            ValueError: The mutation changed the thread's identity, its runs or its
                pending tool calls (which only the log's events may change).
        """
        _check_id("run_id", run_id)

        def mutated() -> AgentState:
            copy = self.state.copy()
            result = mutation(copy)
            new = copy if result is None else result
            if not isinstance(new, AgentState):
                raise TypeError(
                    f"mutation returned {type(new).__name__}, not an AgentState"
                )
            return new

        async with self._lock:
            self._check_writable()
            return await self._commit_state(mutated, reason, run_id)

    async def replace_state(
        self,
        state: AgentState,
        *,
        reason: str = "save",
        expected_version: int | None = None,
    ) -> codec.Record | None:
        """Commit ``state`` as the new state (as events where possible).

        The change is worked out against the writer's state. Records met on the
        way that the writer had not seen (a previous holder's, committed after a
        takeover whose fence was deferred) are taken in first; the change is then
        worked out again against them, or, with ``expected_version``, refused.

        Raises:
            StaleStateError: ``expected_version`` is given and is not the head,
                or records were met on the way.
        """
        async with self._lock:
            self._check_writable()
            if expected_version is not None and expected_version != self.version:
                raise StaleStateError(self.label, expected_version, self.version)
            seen = self.version
            try:
                return await self._commit_state(
                    lambda: keep_log_facts(state.copy(), self.state),
                    reason,
                    None,
                    again=expected_version is None,
                )
            except VersionConflictError as exc:
                if expected_version is None or self.version == seen:
                    raise  # not records met on the way (another writer's epoch)
                # Records found on the way (a previous holder's, committed after
                # our takeover, before our fence): ``state`` is not their sequel.
                raise StaleStateError(
                    self.label, expected_version, self.version
                ) from exc

    async def _commit_state(
        self,
        make: Callable[[], AgentState],
        reason: str,
        run_id: str | None,
        *,
        again: bool = True,
    ) -> codec.Record | None:
        """Commit the change from the state to ``make()``, as at this version only.

        The events are worked out against the writer's state, so they are
        committed only as its sequel: records found in the way (a previous
        holder's, committed after a takeover whose fence is deferred; an earlier
        attempt of ours that landed unseen) are taken in first, and the change is
        worked out again on the new state (``again``), or refused with
        :class:`VersionConflictError`. Committing it anyway would replay a change
        made to an older state over theirs (a message they added, dropped).
        """
        while True:
            seen = self.version
            try:
                return await self._commit_change(make(), reason, run_id, seen)
            except VersionConflictError:
                if not again or self.version == seen:
                    raise

    async def _commit_change(
        self, new: AgentState, reason: str, run_id: str | None, seen: int
    ) -> codec.Record | None:
        """Commit the change from the state to ``new`` if the head is still ``seen``."""
        events = diff_states(self.state, new)
        if events is None:
            # The messages as readers will decode their chunks: checked as they
            # check them, and sharing nothing with the caller's objects, which
            # the writer's state would otherwise hold.
            try:
                context = decode_chunk(msgspec.msgpack.encode(new.context))
            except msgspec.DecodeError as exc:
                raise InvalidEventError(
                    0, "AgentStateReplaced", "events[0].messages", str(exc)
                ) from None
            new = msgspec.structs.replace(new, context=context)
            chunks = self._chunker.chunk(new.context)
            await self._put_chunks(chunks)
            bare = encode_state(new.without_context())
            wire: list[object] = [
                ev.AgentStateReplaced(reason, bare, chunks=[d for d, _ in chunks])
            ]
            local: list[object] = [
                ev.AgentStateReplaced(reason, bare, messages=list(new.context))
            ]
            return await self._commit(wire, None, run_id, seen, local)
        if not events:
            return None
        return await self._commit(events, None, run_id, seen)

    async def clear_context(self, reason: str = "") -> codec.Record:
        """Commit ``ContextCleared``: messages and summary go, the rest stays."""
        return await self.append([ev.ContextCleared(reason)])

    async def __aenter__(self) -> ThreadWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _refuse_unfoldable(events: Sequence[object]) -> None:
    """Refuse an append whose events this writer could not fold after publishing.

    A record whose fold fails would be committed, then every load of the thread
    would refuse it.

    Raises:
        InvalidEventError: An event the state's fold refuses.
    """
    for index, event in enumerate(events):
        if (refused := fold_refusal(event)) is not None:
            raise InvalidEventError(
                index,
                type(event).__name__,
                f"events[{index}].{refused[0]}",
                refused[1],
            )


def _check_id(name: str, value: object) -> None:
    """A ``batch_id`` or ``run_id``: None, or a non-empty string of bounded length."""
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    if not value:
        raise ValueError(
            f"{name} must not be empty (an empty batch_id would not be idempotent)"
            if name == "batch_id"
            else f"{name} must not be empty"
        )
    if len(value) > codec.MAX_ID_LENGTH:
        raise ValueError(
            f"{name} is {len(value)} characters long; at most "
            f"{codec.MAX_ID_LENGTH} are allowed"
        )


def _log_task_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("background checkpoint failed: %s", task.exception())
