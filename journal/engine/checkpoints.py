"""Checkpoint objects: capturing a writer's state, writing it, reading it back.

A checkpoint stores the small non-message state, the list of the context's chunks
(content-addressed blobs shared with earlier checkpoints) and the hash of the record
it covers. Only chunks not written before are stored, so a checkpoint costs what the
context gained since the last one. Chunking runs on the event loop a slice at a time,
so that commits go on in between.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from journal import codec
from journal.checkpoint import decode_chunk, pack_chunk
from journal.engine.batches import ENTRY_SIZE
from projections.agent_state import decode_state

if TYPE_CHECKING:
    from collections.abc import Callable

    from journal import events as ev
    from journal.checkpoint import ChunkEncoder
    from journal.engine.log import ThreadLog
    from projections.agent_state import AgentState

__all__ = [
    "CHUNK_SLICE",
    "Snapshot",
    "plan_chunks",
    "put_chunks",
    "read_checkpoint",
    "store_checkpoint",
]

CHUNK_SLICE = 64
"""Messages a background checkpoint encodes between two commits."""


@dataclass(slots=True)
class Snapshot:
    """What a checkpoint needs, captured synchronously at a version.

    Attributes:
        version: The version it covers.
        record_hash: The hash of the record at ``version``.
        state: The encoded state without its context.
        messages: A private shallow copy of the context (the writer's moves on).
        batches: The packed idempotency window ending at ``version``.
    """

    version: int
    record_hash: bytes
    state: bytes
    messages: list[ev.Msg]
    batches: bytes = b""


async def read_checkpoint(
    log: ThreadLog, version: int
) -> tuple[AgentState, codec.CheckpointBody]:
    """Read the checkpoint at ``version`` with its chunks: the state and the body.

    Raises:
        ObjectNotFoundError: There is no such checkpoint.
        ValueError: It does not decode or disagrees with itself.
        CorruptRecordError: A chunk is missing or fails its hash.
    """
    body = codec.decode_checkpoint(await log.read_checkpoint(version))
    if body.version != version:
        raise ValueError(f"checkpoint file says version {body.version}")
    entries, rest = divmod(len(body.batches), ENTRY_SIZE)
    if rest or entries > version:
        raise ValueError(
            f"checkpoint's batch window of {len(body.batches)} bytes does not fit "
            f"version {version}"
        )
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


async def put_chunks(
    log: ThreadLog,
    chunks: list[tuple[str, list[ev.Msg]]],
    written: set[str],
    packed: dict[str, bytes],
) -> None:
    """Write the chunks not in ``written`` (and add them to it), all durable.

    For a record that references them: those written before may have been a
    checkpoint's, which are not synced, so they are flushed too. ``packed`` holds
    the bytes of chunks the chunker already encoded.
    """
    fresh = [
        (d, packed.get(d) or pack_chunk(m)[1]) for d, m in chunks if d not in written
    ]
    await log.put_blobs(fresh)
    # A chunk found already there (ours or a racing checkpoint's) was not synced
    # by that batch: flush every one the record will reference.
    await log.flush_blobs(d for d, _ in chunks)
    written.update(d for d, _ in fresh)


async def plan_chunks(
    chunker: ChunkEncoder,
    messages: list[ev.Msg],
    written: set[str],
    step: Callable[[], None] | None = None,
) -> tuple[list[str], list[tuple[str, bytes]]]:
    """Chunk ``messages``: all digests, and the bytes of those not yet written.

    On the event loop, a slice of :data:`CHUNK_SLICE` messages at a time, so that
    commits go on in between (a slice takes well under a millisecond). A worker
    thread would gain nothing, since encoding holds the GIL, and releasing the GIL
    often enough for commits costs more than the encoding (``time.sleep(0)`` takes
    80 µs on the machines we measured).
    """
    steps = chunker.chunk_steps(messages, CHUNK_SLICE)
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


async def store_checkpoint(
    log: ThreadLog,
    snap: Snapshot,
    chunker: ChunkEncoder,
    written: set[str],
    clock: Callable[[], float],
    step: Callable[[], None] | None = None,
    *,
    durable: bool = False,
) -> None:
    """Write a checkpoint's new chunks, the checkpoint, its seal, then the hint.

    The chunks and the checkpoint are derived data, written without syncs (see
    :meth:`ThreadLog.create_checkpoint`) unless ``durable``, which flushes them
    before the hint moves. The seal is signed only when the log has a signer (a
    journal opened with a signing key). ``step`` is called each time the work
    resumes (the writer counts them).
    """
    digests, fresh = await plan_chunks(chunker, snap.messages, written, step)
    await log.put_blobs(fresh, derived=True)
    if step is not None:
        step()
    written.update(d for d, _ in fresh)
    body = codec.CheckpointBody(
        codec.FORMAT_VERSION,
        snap.version,
        snap.record_hash,
        clock(),
        snap.state,
        digests,
        len(snap.messages),
        snap.batches,
    )
    await log.create_checkpoint(snap.version, codec.encode_checkpoint(body))
    if durable:
        await log.flush_checkpoint(snap.version, digests)
    if log.signer is not None:
        # Imported here: a journal without a signing key never loads the sealing.
        from journal.engine.sealing import write_seal

        await write_seal(log, log.signer, snap.version, snap.record_hash, clock)
    await log.put_hint(snap.version)
