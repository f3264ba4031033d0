"""Retention: removing the history that an old enough checkpoint covers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from journal.engine.checkpoints import read_checkpoint
from journal.engine.log import RetentionMarker
from journal.errors import CorruptRecordError, ObjectNotFoundError

if TYPE_CHECKING:
    from journal.engine.log import ThreadLog

__all__ = ["DEFAULT_RETENTION_WINDOW", "retain"]

DEFAULT_RETENTION_WINDOW = 7 * 24 * 3600.0
"""Records are removed only once this many seconds old (far beyond any lease)."""


async def retain(
    log: ThreadLog, *, cutoff: float, now: float
) -> RetentionMarker | None:
    """Remove the history covered by a checkpoint committed before ``cutoff``.

    See :meth:`journal.Journal.retain`. Writes the ``RETENTION`` marker first and
    moves the hint up to the retained checkpoint, then deletes older checkpoints,
    then older records.

    Returns:
        The marker written, or None when nothing old enough can be removed.
    """
    current = await log.read_retention()
    floor = current.checkpoint if current is not None else 1
    chosen: int | None = None
    chunks: list[str] = []
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
            chosen, chunks = version, body.chunks
            break
    if chosen is None:
        return None
    # From here on the checkpoint is the only copy of what the records before it
    # held; it was written without a sync.
    await log.flush_checkpoint(chosen, chunks)
    marker = RetentionMarker(chosen, chosen, now)
    await log.write_retention(marker)
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
