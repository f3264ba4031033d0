"""Retention: removing the history that an old enough checkpoint covers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from journal import codec
from journal.checkpoint import MAX_CHUNK_READ, LogSpan, pack_chunk
from journal.engine.checkpoints import (
    flush_stored_checkpoint,
    read_checkpoint,
    read_spans,
    span_messages,
)
from journal.engine.log import RetentionMarker
from journal.errors import CorruptRecordError, ObjectNotFoundError
from journal.keys import key_ids

if TYPE_CHECKING:
    from journal.engine.log import ThreadLog

__all__ = ["DEFAULT_RETENTION_WINDOW", "retain"]

DEFAULT_RETENTION_WINDOW = 7 * 24 * 3600.0
"""Records are removed only once this many seconds old (far beyond any lease)."""


async def retain(
    log: ThreadLog, *, cutoff: float, now: float
) -> RetentionMarker | None:
    """Remove the history covered by a checkpoint committed before ``cutoff``.

    See :meth:`journal.Journal.retain`. Copies into blobs the messages that the
    retained checkpoint and any later one read from the records to be removed (log
    spans), then writes the ``RETENTION`` marker and moves the hint up to the
    retained checkpoint, then deletes older checkpoints, then older records.

    Returns:
        The marker written, or None when nothing old enough can be removed.
    """
    current = await log.read_retention()
    floor = current.checkpoint if current is not None else 1
    chosen: int | None = None
    for version in reversed(await log.checkpoint_versions()):
        if version <= floor:
            break
        try:
            _, body = await read_checkpoint(log, version)
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
    for version in await log.checkpoint_versions():
        if version >= chosen:
            await _spans_below(log, version, chosen)
    # From here on the checkpoint is the only copy of what the records before it
    # held; it was written without a sync. As stored now (its spans below the
    # retained version rewritten), with every chunk and chunk index it names.
    await flush_stored_checkpoint(log, chosen)
    marker = RetentionMarker(chosen, chosen, now, key_ids(log.key))
    await log.write_retention(marker)
    # A writer may have created a checkpoint since the listing above, its spans
    # planned from the marker before this one: fixed now, before any record it
    # names goes. One created after this listing is the writer's to fix: it reads
    # the marker again once its checkpoint exists (see store_checkpoint).
    for version in await log.checkpoint_versions():
        if version > chosen:
            await _spans_below(log, version, chosen)
    if await log.read_hint() < chosen:
        await log.write_hint(chosen)
    # Checkpoints first: a reader that cannot find its old checkpoint looks up the
    # marker and starts from the retained one.
    for version in await log.checkpoint_versions():
        if version < chosen:
            await log.delete_checkpoint(version)
    for version in await log.versions():
        if version >= chosen:
            break
        await log.delete_record(version)
    return marker


async def _spans_below(log: ThreadLog, version: int, floor: int) -> None:
    """Rewrite the checkpoint at ``version`` so it reads nothing below ``floor``.

    Its log spans that start below ``floor`` become blobs (written durably), and the
    checkpoint is replaced, durably, with the new references. A checkpoint that
    cannot be read is left alone: loads skip it as they did before. Chunk index
    references stay as they are: an index never holds a span.
    """
    try:
        body = codec.decode_checkpoint(await log.read_checkpoint(version))
        spans = {r: s for r in body.chunks if (s := LogSpan.parse(r)) is not None}
        below = {r: s for r, s in spans.items() if s.first < floor}
        if not below:
            return
        added = await read_spans(log, list(below.values()))
        blobs: dict[str, bytes] = {}
        refs: list[str] = []
        for ref in body.chunks:
            span = below.get(ref)
            if span is None:
                refs.append(ref)
                continue
            digest, data = pack_chunk(span_messages(log, span, added))
            blobs[digest] = data
            refs.append(digest)
    except (ObjectNotFoundError, ValueError, CorruptRecordError, msgspec.DecodeError):
        return
    await log.put_blobs(list(blobs.items()), limit=MAX_CHUNK_READ)
    rewritten = msgspec.structs.replace(body, chunks=refs)
    await log.rewrite_checkpoint(version, codec.encode_checkpoint(rewritten))
