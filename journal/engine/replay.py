"""Rebuilding a thread's state: the hint, then a checkpoint, then the tail.

:func:`rebuild` starts from the newest usable checkpoint at or below the target (the
``LAST_CHECKPOINT`` hint first, the listing of checkpoints only when the hint is not
usable) and replays the records after it. A missing, corrupt or foreign checkpoint is
skipped with a warning, and so is one that cannot be decrypted or decompressed here;
retention removing records while we read sends the rebuild
back to the checkpoint it kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import msgspec

from journal import codec
from journal.checkpoint import LogSpan
from journal.engine.batches import BatchWindow
from journal.engine.checkpoints import read_checkpoint
from journal.engine.log import READ_BATCH, ChainBrokenError, DowngradeError
from journal.errors import (
    CompressionUnavailableError,
    CorruptRecordError,
    EncryptionError,
    ObjectNotFoundError,
)
from journal.loopless import gather
from projections.agent_state import AgentStateProjection

if TYPE_CHECKING:
    # Names of struct fields too (TC004): these structs are built, never
    # decoded into, so msgspec never resolves their annotations.
    from journal.engine.checkpoints import LogRefs
    from journal.engine.log import RetentionMarker, ThreadLog
    from projections.agent_state import AgentState  # noqa: TC004

__all__ = ["ForeignCheckpointError", "Loaded", "rebuild"]

_RETENTION_RESTARTS = 3


class Loaded(msgspec.Struct):
    """A rebuilt state and what a writer continuing from it needs.

    Attributes:
        state: The state at ``head``.
        head: The version replayed up to.
        head_hash: The hash of the record at ``head``.
        checkpoint: The checkpoint started from (0: none).
        chunks: The chunk blobs that checkpoint references, and the chunk index
            blobs it was read through (all already stored).
        warnings: Checkpoints skipped, and why.
        head_epoch: The epoch of the record at ``head``.
        window: The idempotency window ending at ``head`` (the checkpoint's,
            extended by the records replayed), when asked for.
    """

    state: AgentState
    head: int
    head_hash: bytes
    checkpoint: int
    chunks: set[str]
    warnings: list[str]
    head_epoch: int = 0
    window: BatchWindow | None = None


class ForeignCheckpointError(Exception):
    """A checkpoint that does not belong to this log (it is skipped)."""


async def rebuild(
    log: ThreadLog,
    at_version: int | None,
    *,
    window: bool = False,
    refs: LogRefs | None = None,
    messages: bool = True,
) -> Loaded:
    """Rebuild the thread's state at the head, or as of ``at_version``.

    ``window`` asks for the idempotency window too (writers and checkpoints need
    it; it costs a digest of each replayed record's events). ``refs`` (a writer
    naming log spans) learns which record added each message of the state and the
    spans the checkpoint started from names; a checkpoint refused after its
    provenance was learned leaves harmless extra entries, since entries are matched
    by message identity. ``messages=False`` leaves the context out: the
    checkpoint's chunks are not read, and the state comes back with an empty
    context (the tail's events are folded as usual, then it is emptied).

    Raises:
        ValueError: ``at_version`` is negative, beyond the head, or before what
            retention kept.
        CorruptRecordError: A record in the replayed range fails a check.
        UnknownEventError: A required event type this reader does not know.
    """
    if at_version is not None and at_version < 0:
        raise ValueError(f"at_version must be >= 0, not {at_version}")
    warnings: list[str] = []
    projection = AgentStateProjection(log.label)
    tried: set[int] = set()
    # The stored hash and epoch of records a checkpoint's log spans read: the one
    # the checkpoint covers need not be read again.
    heads: dict[int, tuple[bytes, int]] = {}
    hint = await log.read_hint()
    candidates: list[int] | None = None
    marker: RetentionMarker | None = None
    restarts = 0
    # Why a checkpoint could not be opened here, if one could not: raised instead
    # of "no usable checkpoint" when retention left nothing else to start from.
    unopened: EncryptionError | CompressionUnavailableError | None = None
    while True:
        # Pick the newest checkpoint at or below the target not yet refused.
        version = 0
        if hint and hint not in tried and (at_version is None or hint <= at_version):
            version = hint
        else:
            if candidates is None:
                # Off the fast path: only now is the retention marker worth a GET
                # (beside the listing, not after it).
                candidates, marker = await _candidates_and_marker(log)
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
        indexes: list[str] = []
        encrypted: list[bool] = []
        if version == 0:
            if marker is not None:
                if unopened is not None:
                    raise unopened
                raise CorruptRecordError(
                    log.label,
                    marker.checkpoint,
                    "records before this version were removed by retention and "
                    "no usable checkpoint at or after it remains",
                )
        else:
            tried.add(version)
            try:
                base = await read_checkpoint(
                    log,
                    version,
                    refs.provenance if refs is not None else None,
                    heads,
                    messages=messages,
                    indexes=indexes,
                    encrypted=encrypted,
                )
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
            except (EncryptionError, CompressionUnavailableError) as exc:
                # A checkpoint (or a chunk of it) this reader cannot open: copied
                # from another owner's thread, forged, or written by a journal with
                # keys this one lacks. Derived data: the log still holds it all. A
                # record that needs the key raises the same again when replayed.
                unopened = exc
                warnings.append(
                    f"{log.label}: checkpoint {version} cannot be read here "
                    f"({exc}); skipped"
                )
                continue
        try:
            loaded = await _replay(
                log,
                projection,
                base,
                at_version,
                warnings,
                window=window,
                refs=refs,
                covered=heads.get(version),
                sealed=bool(encrypted) and encrypted[0],
            )
        except ForeignCheckpointError as exc:
            warnings.append(f"{log.label}: checkpoint {version} {exc}; skipped")
        except CorruptRecordError:
            # Retention may have removed records after we chose where to start:
            # start again from what it left, a bounded number of times.
            moved = await log.read_retention()
            if (
                moved is None
                or moved.checkpoint <= version
                or restarts >= _RETENTION_RESTARTS
            ):
                raise
            restarts += 1
            warnings.append(
                f"{log.label}: records after version {version} were removed by "
                f"retention while loading; restarting from version "
                f"{moved.checkpoint}"
            )
            hint, candidates = await log.read_hint(), None
        else:
            # A writer's next checkpoint need not put these again.
            loaded.chunks.update(indexes)
            if not messages:
                loaded.state.context = []
            return loaded


async def _candidates_and_marker(
    log: ThreadLog,
) -> tuple[list[int], RetentionMarker | None]:
    # Raised in the order they would be one after the other.
    listed, read = await gather(log.checkpoint_versions(), log.read_retention())
    return cast("list[int]", listed), cast("RetentionMarker | None", read)


async def _replay(
    log: ThreadLog,
    projection: AgentStateProjection,
    base: tuple[AgentState, codec.CheckpointBody] | None,
    at_version: int | None,
    warnings: list[str],
    *,
    window: bool,
    refs: LogRefs | None,
    covered: tuple[bytes, int] | None = None,
    sealed: bool = False,
) -> Loaded:
    """Fold the log after ``base`` (or from its start) into the state.

    ``covered``: the stored hash and epoch of the record ``base`` covers, when a
    log span of it read that record (checked by its CRC, as a span's records are).
    ``sealed``: ``base`` was stored encrypted. Its writer had the keys, so every
    record after it is encrypted (with a key provider, a plain one is refused).
    """
    batches: BatchWindow | None = None
    chunks: set[str] = set()
    spans: dict[str, str] = {}  # log span references, by chunk digest
    if base is None:
        state = projection.initial(log.key)
        start, prev_hash = 0, codec.GENESIS_HASH
        if window:
            batches = BatchWindow()
    else:
        state, body = base
        start, prev_hash = body.version, body.record_hash
        # Spans are parsed only for a writer (``refs``): a reader needs the blob
        # references alone, and read_checkpoint parsed the spans already.
        for ref in body.chunks:
            if not ref.startswith("@"):
                chunks.add(ref)
            elif refs is not None and (span := LogSpan.parse(ref)) is not None:
                spans[span.digest] = ref
        if window:
            batches = BatchWindow.unpack(start, body.batches)
    # The listing brings the first records with it (one round trip, not two).
    wanted = READ_BATCH if at_version is None else min(READ_BATCH, at_version - start)
    versions, first = await log.tail(start, read=max(0, wanted))
    if at_version is not None:
        versions = [v for v in versions if v <= at_version]
    head_epoch = 0
    if base is not None and not versions:
        # Nothing after the checkpoint: check the record it covers is ours.
        if covered is None:
            try:
                parsed_head = await log.read_parsed(start)
            except ObjectNotFoundError:
                raise ForeignCheckpointError("covers a record that is absent") from None
            covered = parsed_head.hash, parsed_head.body.epoch
        if covered[0] != prev_hash:
            raise ForeignCheckpointError("does not match the log's record hash")
        head_epoch = covered[1]
    # A plain checkpoint was believed only over a plain record (read_checkpoint);
    # the log's start is the genesis.
    batches_read = log.scan(
        versions, after=start, prev_hash=prev_hash, first=first, sealed=sealed
    )
    if at_version is not None and at_version > start + len(versions):
        raise ValueError(
            f"{log.label} has no version {at_version}; its head is "
            f"{start + len(versions)}"
        )
    apply = projection.apply
    try:
        async for parsed in batches_read:
            if parsed:
                prev_hash = parsed[-1].hash
            if batches is not None:
                for p in parsed:
                    batches.add(p.body.version, p.body.batch_id, p.content_digest())
            materialized = await log.materialize(parsed)
            with codec.gc_paused():
                for record in materialized:
                    before = state.context
                    length = len(before)
                    for event in record.events:
                        state = apply(state, record, event)
                    state.version = record.version
                    head_epoch = record.epoch
                    if refs is not None:
                        refs.provenance.observe_fold(
                            record, before, length, state.context
                        )
    except (ChainBrokenError, DowngradeError) as exc:
        if base is not None and exc.version == start + 1:
            # The record right after the checkpoint refuses it, not the log. A
            # downgrade there: an encrypted checkpoint over a plain record may be
            # followed by the plain records of a writer without keys (which skips
            # it); a replay from before it judges the record against the records
            # before it, not the checkpoint.
            raise ForeignCheckpointError(
                "is encrypted but the record after it is not"
                if isinstance(exc, DowngradeError)
                else "does not match the log's record hash"
            ) from None
        raise
    if refs is not None:
        # Only now: a checkpoint refused while replaying must not lend its spans.
        refs.known.update(spans)
    return Loaded(
        state,
        start + len(versions),
        prev_hash,
        start,
        chunks,
        warnings,
        head_epoch,
        batches,
    )
