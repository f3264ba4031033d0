"""Checkpoint objects: capturing a writer's state, writing it, reading it back.

A checkpoint stores the small non-message state, the list of the context's chunks
(content-addressed blobs shared with earlier checkpoints) and the hash of the record
it covers. Only chunks not written before are stored, so a checkpoint costs what the
context gained since the last one. Chunking runs on the event loop a slice at a time,
so that commits go on in between.

On a store that reads records in bulk (:attr:`ObjectStore.reads_log_in_bulk`), a
chunk whose messages the writer can trace to the records that added them is named
as a log span instead of being written again (:class:`LogRefs`); reading it back
reads those records (:func:`read_spans`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, cast

import msgspec

from journal import codec
from journal.checkpoint import (
    MAX_CHUNK_READ,
    SPAN_MAX_RECORDS,
    SPAN_MIN_DENSITY,
    SPAN_REWRITES,
    LogSpan,
    decode_chunk,
    pack_chunk,
)
from journal.chunk_index import (
    INDEX_LEVELS,
    MAX_CHUNK_REFS,
    MAX_INDEX_BYTES,
    decode_index,
    pack_refs,
    parse_index_ref,
)
from journal.engine.batches import ENTRY_SIZE
from journal.engine.log import (
    DOWNGRADE,
    READ_BATCH,
    ChainBrokenError,
    DowngradeError,
    chain_broken_at,
)
from journal.engine.provenance import Provenance
from journal.errors import (
    CompressionUnavailableError,
    CorruptRecordError,
    EncryptionError,
    ObjectNotFoundError,
    PreconditionFailedError,
)
from journal.events import message_added
from journal.layout import record_name
from journal.loopless import pause
from projections.agent_state import decode_state

if TYPE_CHECKING:
    # Names of struct fields too (TC004): these structs are built, never
    # decoded into, so msgspec never resolves their annotations.
    from collections.abc import Callable

    from journal import events as ev  # noqa: TC004
    from journal.checkpoint import ChunkEncoder
    from journal.engine.log import ThreadLog
    from journal.store import ObjectStore
    from projections.agent_state import AgentState

__all__ = [
    "CHUNK_SLICE",
    "AddedMessages",
    "LogRefs",
    "Snapshot",
    "check_body",
    "expand_refs",
    "flush_stored_checkpoint",
    "parse_refs",
    "plan_chunks",
    "put_chunks",
    "read_checkpoint",
    "read_spans",
    "span_messages",
    "store_checkpoint",
]

CHUNK_SLICE = 64
"""Messages a background checkpoint encodes between two commits."""


class Snapshot(msgspec.Struct):
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


class LogRefs(msgspec.Struct):
    """A writer's means of naming chunks as log spans.

    Attributes:
        provenance: Where each message of the writer's context came from.
        min_density: Messages per record a new span needs (see
            :data:`journal.checkpoint.SPAN_MIN_DENSITY`); 0 for any.
        max_version: The longest thread (in records) whose checkpoints name
            spans (see :data:`journal.checkpoint.SPAN_MAX_RECORDS`).
        known: The log span reference of each chunk digest already stored as one.
    """

    provenance: Provenance
    min_density: float = 0.0
    max_version: int = 2**63
    known: dict[str, str] = msgspec.field(default_factory=dict)

    @classmethod
    def of(cls, log_spans: str, store: ObjectStore) -> LogRefs | None:
        """The means a journal set to ``log_spans`` has on ``store``, if any."""
        if log_spans == "never" or (
            log_spans == "dense" and not store.reads_log_in_bulk
        ):
            return None
        if log_spans == "dense":
            return cls(Provenance(), SPAN_MIN_DENSITY, SPAN_MAX_RECORDS)
        return cls(Provenance())

    def forget_before(self, version: int) -> None:
        """Drop everything that reaches below ``version`` (retention removed it)."""
        self.provenance.forget_before(version)
        self.known = {
            d: r
            for d, r in self.known.items()
            if (span := LogSpan.parse(r)) is not None and span.first >= version
        }


def parse_refs(version: int, refs: list[str]) -> tuple[list[str], dict[str, LogSpan]]:
    """Split a checkpoint's chunk references: the blob digests and the log spans.

    Raises:
        ValueError: A span reference is malformed or reaches past ``version``.
    """
    blobs: list[str] = []
    spans: dict[str, LogSpan] = {}
    for ref in refs:
        span = LogSpan.parse(ref)
        if span is None:
            blobs.append(ref)
        elif span.last > version:
            raise ValueError(
                f"log span {ref[:60]}... reaches past the checkpoint's version"
            )
        else:
            spans[ref] = span
    return blobs, spans


class AddedMessages:
    """The messages records add to the context, flat, with each record's range.

    What :func:`read_spans` returns: one list of messages in version order and,
    per version, where its messages start and stop in it (dicts of integers, which
    the cyclic collector does not track), instead of a list per record.
    """

    __slots__ = ("messages", "plain", "sealed", "start", "stop")

    def __init__(self) -> None:
        self.messages: list[ev.Msg] = []
        self.start: dict[int, int] = {}
        self.stop: dict[int, int] = {}
        self.plain = 0
        """With a key provider, the highest version read as a plain record."""
        self.sealed = False
        """With a key provider, whether an encrypted record was read."""

    def of(self, version: int) -> list[ev.Msg]:
        """The messages ``version`` adds, in order."""
        return self.messages[self.start[version] : self.stop[version]]

    def versions(self) -> list[int]:
        """The versions read, ascending."""
        return sorted(self.stop)

    def add(self, first: int, begin: int, ends: list[int]) -> None:
        """Note the messages records ``first``, ``first + 1``, ... added.

        They lie from ``begin`` up to each of ``ends`` (the list's length after
        each record).
        """
        versions = range(first, first + len(ends))
        self.stop.update(zip(versions, ends, strict=True))
        self.start[first] = begin
        self.start.update(zip(versions[1:], ends, strict=False))


async def read_spans(
    log: ThreadLog,
    spans: list[LogSpan],
    provenance: Provenance | None = None,
    heads: dict[int, tuple[bytes, int]] | None = None,
) -> AddedMessages:
    """The messages each record of the spans' ranges adds.

    Overlapping and adjacent ranges are read once, as one run. Each record's
    checksum is checked, none may be missing, and each one's ``prev_hash`` must be
    the stored hash of the record before it in the run; the hashes themselves are
    not recomputed (see :func:`codec.parse_messages`).
    ``provenance`` learns where each message came from; ``heads`` the stored hash
    and epoch of the last record of each run, by version (with a key provider,
    not of a plain one, whose stored hash nothing checked).

    With a key provider (:attr:`ThreadLog.keyed`), a plain record after an
    encrypted one is refused, and the result notes the last plain record read
    (:attr:`AddedMessages.plain`): what a plain record adds is not authenticated,
    so a caller that trusts the span's digest checks it.

    Raises:
        CorruptRecordError: A record is missing or fails a check
            (``DowngradeError``: a plain record after an encrypted one).
    """
    ranges = sorted((s.first, s.last) for s in spans)
    runs: list[list[int]] = []
    for first, last in ranges:
        if runs and first <= runs[-1][1] + 1:
            runs[-1][1] = max(runs[-1][1], last)
        else:
            runs.append([first, last])
    added = AddedMessages()
    for first, last in runs:
        head = await _read_run(log, first, last, added)
        if heads is not None and not (log.keyed and added.plain == last):
            heads[last] = head
    if provenance is not None:
        for version in added.versions():
            provenance.observe(version, added.of(version))
    return added


def _broken(log: ThreadLog, version: int) -> ChainBrokenError:
    return ChainBrokenError(log.label, version, chain_broken_at(version))


async def _read_run(
    log: ThreadLog, first: int, last: int, added: AddedMessages
) -> tuple[bytes, int]:
    """Add records ``first`` to ``last`` to ``added``, checked like a scan.

    Plain records go through :func:`codec.parse_messages` (one decode each, only
    the messages built, checksums but not hashes checked); any other (encrypted,
    an event in a blob, an unknown type) through the general parse and
    materialize.

    Returns:
        The stored hash and the epoch of record ``last``.
    """
    label = log.label
    keyed = log.keyed
    prev: bytes | None = None
    epoch = 0
    messages = added.messages
    for start in range(first, last + 1, READ_BATCH):
        versions = range(start, min(last, start + READ_BATCH - 1) + 1)
        # Views of one read of the segment, not a copy per record: the bytes are
        # parsed here and dropped.
        raw = await log.store.read_sibling_buffers(
            log.log_dir, list(map(record_name, versions))
        )
        if None in raw:
            missing = versions[raw.index(None)]
            raise CorruptRecordError(label, missing, "record is missing")
        stored = cast("list[bytes | memoryview]", raw)
        done = 0
        while done < len(stored):
            version = start + done
            begin, ends = len(messages), cast("list[int]", [])
            with codec.gc_paused():
                run = codec.parse_messages(
                    stored[done:] if done else stored,
                    version,
                    label=label,
                    messages=messages,
                    ends=ends,
                )
                if done + run.read == len(stored):
                    # All read: the views go now, not into the collector's next
                    # pass, which comes as soon as it is back on.
                    stored.clear()
            if run.read:
                if keyed:
                    if added.sealed:
                        raise DowngradeError(label, version, DOWNGRADE)
                    added.plain = version + run.read - 1
                if prev is not None and run.prev_hash != prev:
                    raise _broken(log, version)
                added.add(version, begin, ends)
                prev, epoch = run.hash, run.epoch
                done += run.read
                if run.broken:
                    raise _broken(log, start + done)
                continue
            # Not a plain record of known events: the general path reads it.
            parsed = await log.parse(bytes(stored[done]), version, strict=True)
            if keyed:
                if parsed.encrypted:
                    added.sealed = True
                elif added.sealed:
                    raise DowngradeError(label, version, DOWNGRADE)
                else:
                    added.plain = version
            record = (await log.materialize([parsed]))[0]
            if prev is not None and parsed.body.prev_hash != prev:
                raise _broken(log, version)
            messages.extend(
                m for e in record.events if (m := message_added(e)) is not None
            )
            added.add(version, begin, [len(messages)])
            prev, epoch = parsed.hash, parsed.body.epoch
            done += 1
    assert prev is not None  # noqa: S101 - the run holds one record at least
    return prev, epoch


def span_messages(log: ThreadLog, span: LogSpan, added: AddedMessages) -> list[ev.Msg]:
    """The messages ``span`` names, from :func:`read_spans`'s result.

    Raises:
        CorruptRecordError: The records add fewer messages than it names, or the
            last one adds none of them.
    """
    # The span's records lie side by side in ``added.messages``: the slice from
    # the first one's start, after ``skip``, must hold ``count`` messages and end
    # inside the last record's.
    begin = added.start[span.first] + span.skip
    end = begin + span.count
    if end <= added.stop[span.last] and end > added.start[span.last]:
        return added.messages[begin:end]
    raise CorruptRecordError(
        log.label,
        span.last,
        f"records {span.first}-{span.last} do not add the {span.count} messages "
        "their log span names",
    )


async def expand_refs(
    log: ThreadLog, refs: list[str], limit: int
) -> tuple[list[str], list[str]]:
    """A checkpoint's chunk references with its index blobs read: flat, in order.

    See :mod:`journal.chunk_index`. Each level's index blobs are read in one batch
    and checked against their digests. A list without index references is
    returned as it is. ``limit`` is the checkpoint's message count: every chunk
    and log span holds a message at least, so indexes standing for more
    references than that are refused before the list is built (a few small index
    blobs naming each other over and over would otherwise stand for millions).

    Returns:
        The flat references, and the digests of the index blobs read.

    Raises:
        ObjectNotFoundError: An index blob is missing.
        CorruptRecordError: An index blob does not match its digest.
        ValueError: A reference or an index blob is malformed.
    """
    indexes: list[str] = []
    # Each round replaces the highest level's references by the level below them
    # (decode_index checks that), so INDEX_LEVELS rounds leave none.
    for _ in range(INDEX_LEVELS):
        named = {
            ref: p
            for ref in refs
            if ref[:1] == "#" and (p := parse_index_ref(ref)) is not None
        }
        if not named:
            break
        digests = list(dict.fromkeys(d for _, d in named.values()))
        stored = await log.read_blobs_raw(digests, index=True)
        blobs: dict[str, bytes | memoryview] = {}
        for digest, data in zip(digests, stored, strict=True):
            if data is None:
                raise ObjectNotFoundError(log.index_key(digest))
            blob = await log.check_blob(data, digest, limit=MAX_INDEX_BYTES)
            if blob is None:
                raise CorruptRecordError(
                    log.label, None, f"chunk index {digest} does not match its hash"
                )
            blobs[digest] = blob
        indexes += digests
        groups = {
            ref: decode_index(blobs[digest], level)
            for ref, (level, digest) in named.items()
        }
        # Each reference of the next level stands for one at least: counted
        # before anything is built.
        size = sum(len(groups[ref]) if ref in groups else 1 for ref in refs)
        if size > limit:
            raise ValueError(
                f"chunk indexes stand for {size} references or more, more than the "
                f"checkpoint's {limit} messages"
            )
        if size > MAX_CHUNK_REFS:
            raise ValueError(
                f"chunk indexes stand for {size} references or more, more than the "
                f"{MAX_CHUNK_REFS} a checkpoint may name"
            )
        flat: list[str] = []
        for ref in refs:
            group = groups.get(ref)
            if group is None:
                flat.append(ref)
            else:
                flat += group
        refs = flat
    return refs, indexes


def check_body(body: codec.CheckpointBody, version: int) -> None:
    """Check what a checkpoint body says of itself, as every load does.

    Raises:
        ValueError: It names another version, or its batch window is not whole
            entries of :data:`~journal.engine.batches.ENTRY_SIZE` bytes, at most
            one a record.
    """
    if body.version != version:
        raise ValueError(f"checkpoint file says version {body.version}")
    entries, rest = divmod(len(body.batches), ENTRY_SIZE)
    if rest or entries > version:
        raise ValueError(
            f"checkpoint's batch window of {len(body.batches)} bytes does not fit "
            f"version {version}"
        )


async def read_checkpoint(
    log: ThreadLog,
    version: int,
    provenance: Provenance | None = None,
    heads: dict[int, tuple[bytes, int]] | None = None,
    *,
    messages: bool = True,
    indexes: list[str] | None = None,
    encrypted: list[bool] | None = None,
) -> tuple[AgentState, codec.CheckpointBody]:
    """Read the checkpoint at ``version`` with its chunks: the state and the body.

    ``provenance`` learns where the messages read from log spans came from, and
    ``heads`` what :func:`read_spans` tells of the records it read. With
    ``messages=False`` the chunks are neither read nor checked: the state's
    context is left empty. Otherwise the body returned lists its chunks flat, its
    chunk index blobs read (:func:`expand_refs`), and ``indexes`` (if given) gets
    the digests of those index blobs. ``encrypted`` (if given) gets whether the
    checkpoint was stored encrypted.

    With a key provider (:attr:`ThreadLog.keyed`), a plain checkpoint is believed
    only over a plain record (:meth:`ThreadLog.check_plain_checkpoint`, which
    tells ``heads`` that record's hash and epoch), and an encrypted one's log
    spans over plain records must rebuild the chunks their digests name: the
    stored hashes of plain records are not recomputed, and nothing else ties
    what they add to the checkpoint.

    Raises:
        ObjectNotFoundError: There is no such checkpoint.
        ValueError: It does not decode or disagrees with itself, or it is plain
            where the thread's records are encrypted.
        CorruptRecordError: A chunk or chunk index is missing or fails its hash,
            or a record a log span names is missing or fails a check.
    """
    opened, sealed = await log.open_checkpoint(version)
    body = codec.decode_checkpoint(opened)
    check_body(body, version)
    if log.keyed and not sealed:
        covered = await log.check_plain_checkpoint(version, body.record_hash)
        if heads is not None:
            heads[version] = covered.hash, covered.body.epoch
    if encrypted is not None:
        encrypted.append(sealed)
    state = decode_state(body.state)
    state.version = version
    if not messages:
        return state, body
    try:
        flat, read = await expand_refs(log, body.chunks, body.message_count)
    except ObjectNotFoundError as exc:
        raise CorruptRecordError(
            log.label, version, f"a chunk index is missing ({exc.key})"
        ) from None
    if read:
        body = msgspec.structs.replace(body, chunks=flat)
        if indexes is not None:
            indexes += read
    blobs, spans = parse_refs(version, body.chunks)
    chunks = await log.read_stored_blobs(blobs) if blobs else {}
    added = (
        await read_spans(log, list(spans.values()), provenance, heads)
        if spans
        else AddedMessages()
    )
    if added.plain and sealed:
        # Only with a key provider (``plain`` is 0 otherwise).
        for named in spans.values():
            if named.first <= added.plain:
                _check_digest(log, named, added)
    context = state.context
    claimed = body.message_count
    # A chunk named again (a context holding the same run of messages twice, or a
    # forged list repeating one reference thousands of times) is decoded once:
    # messages are never changed in place, so the context may share them.
    decoded: dict[str, list[ev.Msg]] = {}
    for ref in body.chunks:
        span = spans.get(ref)
        if span is not None:
            part = span_messages(log, span, added)
        else:
            cached = decoded.get(ref)
            if cached is None:
                # Checked (decompressed) and decoded one at a time: only one
                # chunk's bytes are held decompressed at once.
                data = await log.check_blob(chunks[ref], ref, limit=MAX_CHUNK_READ)
                if data is None:
                    raise CorruptRecordError(
                        log.label, version, f"blob {ref} does not match its hash"
                    )
                # Decoding allocates one object per message and block, and
                # nothing of it can form a cycle: the cyclic GC would only rescan
                # the growing context.
                with codec.gc_paused():
                    cached = decoded[ref] = decode_chunk(data)
                del data
            part = cached
        # Checked before the context grows, not once it is whole: a few small
        # blobs can otherwise stand for millions of messages.
        if len(context) + len(part) > claimed:
            raise ValueError(
                f"checkpoint's chunks hold more than the {claimed} messages it claims"
            )
        context.extend(part)
    if len(context) != claimed:
        raise ValueError(
            f"checkpoint holds {len(context)} messages, expected {claimed}"
        )
    return state, body


def _check_digest(log: ThreadLog, span: LogSpan, added: AddedMessages) -> None:
    """Check that ``span`` holds the chunk its digest names.

    Raises:
        CorruptRecordError: It does not (or its records add too few messages).
    """
    if pack_chunk(span_messages(log, span, added))[0] != span.digest:
        raise CorruptRecordError(
            log.label,
            span.last,
            f"records {span.first}-{span.last} do not hold the chunk their log "
            "span names",
        )


async def _flush_found(log: ThreadLog, snap: Snapshot) -> bool:
    """Flush the checkpoint found at ``snap.version`` with all it names, if usable.

    An exclusive create keeps the checkpoint already there: the writer's own
    background one, another process's, or one a power cut tore. Read whole, it is
    what must become durable, and it may name other chunks and index blobs than
    the caller's (a background checkpoint past the log span limit turned other
    spans into blobs). False when it cannot be read (torn, naming what the cut
    lost, or not to be opened with this journal's keys) or covers another record:
    the caller's replaces it.
    """
    found: list[str] = []
    try:
        _, stored = await read_checkpoint(log, snap.version, indexes=found)
    except (
        ValueError,
        CorruptRecordError,
        msgspec.DecodeError,
        EncryptionError,
        CompressionUnavailableError,
    ):
        return False
    if stored.record_hash != snap.record_hash:
        return False
    await log.flush_checkpoint(snap.version, stored.chunks, found)
    return True


async def flush_stored_checkpoint(log: ThreadLog, version: int) -> None:
    """Make the checkpoint stored at ``version`` durable, with all it names.

    What the stored file names, read back (its chunks and chunk index blobs), for
    a caller that did not write it or whose list may differ from it: retention
    keeping it, ``Journal.checkpoint`` finding the head checkpointed already.

    Raises:
        ObjectNotFoundError: There is no checkpoint at ``version``, or an index
            blob it names is missing.
        ValueError: It, or an index blob it names, is malformed.
        CorruptRecordError: An index blob does not match its digest.
    """
    stored = codec.decode_checkpoint(await log.read_checkpoint(version))
    chunks, indexes = await expand_refs(log, stored.chunks, stored.message_count)
    await log.flush_checkpoint(version, chunks, indexes)


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
    # A later checkpoint may name these chunks: stored so that it can read them.
    await log.put_blobs(fresh, limit=MAX_CHUNK_READ)
    # A chunk found already there (ours or a racing checkpoint's) was not synced
    # by that batch: flush every one the record will reference.
    await log.flush_blobs(d for d, _ in chunks)
    written.update(d for d, _ in fresh)


async def plan_chunks(
    chunker: ChunkEncoder,
    messages: list[ev.Msg],
    written: set[str],
    step: Callable[[], None] | None = None,
    refs: LogRefs | None = None,
    rewrite: int | None = None,
) -> tuple[list[str], list[tuple[str, bytes]]]:
    """Chunk ``messages``: every chunk's reference, and the bytes of new blobs.

    A chunk already written as a blob is named by its digest; with ``refs``, one
    stored as a log span before, or whose messages ``refs`` can trace to the records
    that added them, is named as a log span and not written. With ``rewrite`` (a
    thread past ``refs.max_version``), no new span is named and the first
    ``rewrite`` chunks named as spans before are written as blobs.

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
        await pause()
    names: list[str] = []
    fresh: list[tuple[str, bytes]] = []
    for digest, run in chunks:
        if digest in written:
            names.append(digest)
            continue
        if refs is not None:
            ref = refs.known.get(digest)
            if ref is None and rewrite is None:
                span = refs.provenance.span(run, digest, refs.min_density)
                if span is not None:
                    ref = refs.known[digest] = span.ref()
            elif ref is not None and rewrite:
                rewrite -= 1
                ref = None
            if ref is not None:
                names.append(ref)
                continue
        names.append(digest)
        packed = chunker.packed.get(digest)
        if packed is None:
            # A chunk the chunker did not encode this time (one a span named,
            # now copied): up to half a millisecond each, so one at a time.
            packed = pack_chunk(run)[1]
            if step is not None:
                step()
            await pause()
        fresh.append((digest, packed))
    return names, fresh


async def store_checkpoint(
    log: ThreadLog,
    snap: Snapshot,
    chunker: ChunkEncoder,
    written: set[str],
    clock: Callable[[], float],
    step: Callable[[], None] | None = None,
    *,
    durable: bool = False,
    refs: LogRefs | None = None,
) -> None:
    """Write a checkpoint's new chunks, the checkpoint, its seal, then the hint.

    The chunks and the checkpoint are derived data, written without syncs (see
    :meth:`ThreadLog.create_checkpoint`) unless ``durable``, which flushes them
    before the hint moves. The seal is signed only when the log has a signer (a
    journal opened with a signing key). ``step`` is called each time the work
    resumes (the writer counts them). With ``refs``, chunks the log already holds
    are named as log spans (see :func:`plan_chunks`) while the thread holds at
    most ``refs.max_version`` records (a longer one's checkpoints name no new
    span and write :data:`~journal.checkpoint.SPAN_REWRITES` of those named before
    as blobs each); records retention removed are not named (the marker is read
    first). A long list of chunks is stored as index blobs shared with the
    checkpoints before and after (:mod:`journal.chunk_index`).
    """
    rewrite = None
    floor = 0
    if refs is not None:
        marker = await log.read_retention()
        if marker is not None:
            floor = marker.first_retained
            refs.forget_before(floor)
        if snap.version > refs.max_version:
            rewrite = SPAN_REWRITES
    digests, indexes, encoded = await _encode_checkpoint(
        log, snap, chunker, written, clock, step, refs, rewrite
    )
    created = await log.create_checkpoint(snap.version, encoded)
    if created and refs is not None and rewrite is None:
        # Retention may have run while the spans were planned: its marker was
        # read before, and its listing of the checkpoints to fix came before this
        # one existed. Read again now that it exists (see retention.retain).
        moved = await log.read_retention()
        if (
            moved is not None
            and moved.first_retained > floor
            and _lowest_span(digests) < moved.first_retained
        ):
            refs.forget_before(moved.first_retained)
            digests, indexes, encoded = await _encode_checkpoint(
                log, snap, chunker, written, clock, step, refs, rewrite
            )
            with contextlib.suppress(ObjectNotFoundError, PreconditionFailedError):
                # Changed or gone: retention fixed or removed it first.
                await log.rewrite_checkpoint(snap.version, encoded)
    if durable and (created or not await _flush_found(log, snap)):
        if not created:
            await log.rewrite_checkpoint(snap.version, encoded)
        await log.flush_checkpoint(snap.version, digests, indexes)
    if log.signer is not None:
        # Imported here: a journal without a signing key never loads the sealing.
        from journal.engine.sealing import write_seal

        await write_seal(log, log.signer, snap.version, snap.record_hash, clock)
    await log.put_hint(snap.version)


async def _encode_checkpoint(
    log: ThreadLog,
    snap: Snapshot,
    chunker: ChunkEncoder,
    written: set[str],
    clock: Callable[[], float],
    step: Callable[[], None] | None,
    refs: LogRefs | None,
    rewrite: int | None,
) -> tuple[list[str], list[str], bytes]:
    """Plan a checkpoint's chunks, store the new ones, and encode it.

    Returns:
        The chunk references (spans and digests, before grouping into indexes),
        the digests of the index blobs grouping them, and the encoded checkpoint.
    """
    digests, fresh = await plan_chunks(
        chunker, snap.messages, written, step, refs, rewrite
    )
    if refs is not None:
        if rewrite is not None:
            refs.provenance = Provenance()  # it names no new span: drop what it held
        else:
            refs.provenance.prune(snap.messages, snap.version)
    stored, indexes = pack_refs(digests)
    # Index digests share ``written`` with chunk digests: a group's bytes are
    # never a chunk's (an array of strings, not of messages).
    new_indexes = [(d, b) for d, b in dict(indexes).items() if d not in written]
    await log.put_blobs(fresh, derived=True, limit=MAX_CHUNK_READ)
    await log.put_blobs(new_indexes, derived=True, index=True)
    if step is not None:
        step()
    written.update(d for d, _ in fresh)
    written.update(d for d, _ in new_indexes)
    body = codec.CheckpointBody(
        codec.FORMAT_VERSION,
        snap.version,
        snap.record_hash,
        clock(),
        snap.state,
        stored,
        len(snap.messages),
        snap.batches,
    )
    return digests, [d for d, _ in indexes], codec.encode_checkpoint(body)


def _lowest_span(refs: list[str]) -> float:
    """The lowest version a log span among ``refs`` starts at (inf: none)."""
    firsts = [s.first for r in refs if r[:1] == "@" and (s := LogSpan.parse(r))]
    return min(firsts, default=float("inf"))
