"""Checkpoints: derived snapshots that bound replay, with content-addressed chunks.

A checkpoint stores the small non-message part of the state inline and the messages
as a list of chunk references. Chunk boundaries are content-defined (a boundary
follows a message whose id hashes to 0 mod :data:`CHUNK_MODULUS`, or a chunk reaching
:data:`MAX_CHUNK_MESSAGES` messages), so appending messages leaves every earlier
chunk unchanged and dropping a prefix (a compaction) shifts nothing: successive
checkpoints share their chunks and write only what changed. Chunks are immutable
blobs (``blobs/<sha256>``) checked on read.

``LAST_CHECKPOINT`` is only a hint: it may lag or point at something missing or
corrupt, so readers verify what they find and fall back to an earlier checkpoint or
to version 1, with a warning. A checkpoint names the hash of the record it covers;
one whose hash does not match the log is refused.

Where the store reads a thread's records in bulk about as cheaply as it reads blobs
(local segment files), a chunk whose messages the log already holds, in order, is
not copied into a blob: the checkpoint names it as a :class:`LogSpan`, the records
that added those messages to the context. The messages are then stored once.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

import msgspec

from journal.events import Msg

if TYPE_CHECKING:
    from collections.abc import Generator, Sequence

__all__ = [
    "CHUNK_MODULUS",
    "DEFAULT_CHECKPOINT_EVERY",
    "FORCED_AFTER",
    "LOG_SPANS",
    "MAX_CHUNK_MESSAGES",
    "MAX_CHUNK_READ",
    "OPEN_RUN_SLACK",
    "SPAN_MAX_RECORDS",
    "SPAN_MIN_DENSITY",
    "SPAN_REWRITES",
    "CheckpointPolicy",
    "ChunkEncoder",
    "LogSpan",
    "check_log_spans",
    "decode_chunk",
    "ends_chunk",
    "open_run",
    "pack_chunk",
    "ref_digest",
]

DEFAULT_CHECKPOINT_EVERY = 100
CHUNK_MODULUS = 64
MAX_CHUNK_MESSAGES = 256
MAX_CHUNK_BYTES = 1024 * 1024
MAX_CHUNK_READ = 16 * MAX_CHUNK_BYTES
"""The most bytes a checkpoint's chunk blob may decompress to when read.

A chunk ends once it reaches :data:`MAX_CHUNK_BYTES`, so one is at most that plus
its last message: this leaves 15 MiB for that message. Writers store a chunk
longer than this uncompressed (it costs no decompression to read), so no chunk a
writer stores is refused; a compressed frame claiming more (a forged blob of zeros
that hashes to its name decompresses to gigabytes from a few kilobytes) is refused
before anything is allocated, and the checkpoint skipped.
"""
OPEN_RUN_SLACK = 4
"""Messages a checkpoint may leave in its last, open chunk (see CheckpointPolicy)."""
FORCED_AFTER = 4
"""Intervals (``every`` records) after which a checkpoint is due with or without a
chunk boundary.

Records that add one message each (an agent run's) pass 100 records without a
boundary about one time in five (``(63/64) ** 100``). Forced at twice the interval,
that many checkpoints wrote a partly filled chunk of 100-200 messages which the next
one wrote again with more: 0.64 MB of a 1,000-turn ``Agent.call`` thread's 2.58 MB
of chunk blobs held messages stored in a later chunk as well. At four intervals one
checkpoint in about a hundred is forced. The price: a load may replay up to four
intervals of records past its checkpoint instead of two (on S3, one GET each), and
on such threads the gap between checkpoints averages about 160 records, not 150.
"""

_encoder = msgspec.msgpack.Encoder()
_chunk_decoder = msgspec.msgpack.Decoder(list[Msg])


class CheckpointPolicy(msgspec.Struct, frozen=True):
    """When a writer checkpoints on its own.

    A checkpoint is due once ``every`` records have been committed since the last
    one, at the first commit whose context ends at most :data:`OPEN_RUN_SLACK`
    messages after a chunk boundary, and after :data:`FORCED_AFTER` ``* every``
    records in any case.
    Boundaries are about 64 messages apart; waiting for one means a checkpoint
    writes next to no partly filled chunk that the next checkpoint writes again
    with more messages (which otherwise costs about 15% of the payload in bytes).

    Attributes:
        every: The interval in records (0 disables automatic checkpoints;
            ``checkpoint()`` still works).
    """

    every: int = DEFAULT_CHECKPOINT_EVERY

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"checkpoint every must be >= 0, not {self.every}")

    def due(
        self,
        version: int,
        last_checkpoint: int,
        messages: Sequence[Msg] | None = None,
    ) -> bool:
        """Whether a checkpoint is due at ``version``.

        Args:
            version: The version just committed.
            last_checkpoint: The version of the last checkpoint (0: none).
            messages: The context at ``version``; None skips the wait for a chunk
                boundary.
        """
        gap = version - last_checkpoint
        if self.every <= 0 or gap < self.every:
            return False
        return (
            messages is None
            or gap >= FORCED_AFTER * self.every
            or open_run(messages, OPEN_RUN_SLACK) <= OPEN_RUN_SLACK
        )


def open_run(messages: Sequence[Msg], limit: int) -> int:
    """How many messages follow the context's last chunk boundary (up to limit+1).

    A chunk closed by its size alone is not seen (rare; it only costs a rewrite).
    """
    for n in range(min(limit + 1, len(messages))):
        if ends_chunk(messages[-1 - n].id):
            return n
    return min(limit + 1, len(messages))


def ends_chunk(message_id: str) -> bool:
    """Whether a message with this id ends a chunk (about one id in 64 does).

    The content-defined boundary rule of :class:`ChunkEncoder`, by id alone.
    """
    digest = hashlib.blake2b(message_id.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % CHUNK_MODULUS == 0


class ChunkEncoder:
    """Chunks a context incrementally: work is proportional to what changed.

    When the context only grew since the previous call (its old part compares equal,
    which for the same message objects is an identity check in C), the chunks closed
    last time are reused and only the still-open last chunk and the new messages are
    processed. Anything else starts over.

    Attributes:
        packed: The bytes of the chunks the latest call encoded, by digest (the
            reused ones are not in it), so that writing them encodes nothing twice.
    """

    def __init__(self) -> None:
        self._previous: list[Msg] = []
        self._closed: list[tuple[str, list[Msg]]] = []
        self._closed_upto = 0
        self.packed: dict[str, bytes] = {}

    def chunk(self, messages: Sequence[Msg]) -> list[tuple[str, list[Msg]]]:
        """Split ``messages`` into chunks.

        Returns:
            ``(sha256 hex, messages)`` per chunk, in order; :func:`pack_chunk` gives
            a chunk's bytes when the caller needs to write it.
        """
        steps = self.chunk_steps(messages)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                chunks: list[tuple[str, list[Msg]]] = done.value
                return chunks

    def chunk_steps(
        self, messages: Sequence[Msg], pause_every: int = 0
    ) -> Generator[None, None, list[tuple[str, list[Msg]]]]:
        """:meth:`chunk`, in steps: a generator that returns the chunks.

        It yields after every ``pause_every`` messages it encodes (0: never), so
        that an event loop can chunk a long context between commits instead of
        holding them up (or handing the work to a thread, which the GIL would make
        wait just as long). Nothing changes until it has run to its end.
        """
        previous = self._previous
        head = messages[: len(previous)]
        if (
            previous
            and len(messages) >= len(previous)
            # One slice, compared in C (identity first): a fifth of the time of
            # copying it into a new list before comparing.
            and (head if isinstance(head, list) else list(head)) == previous
        ):
            closed = list(self._closed)
            start = self._closed_upto
        else:
            closed, start = [], 0
        run: list[Msg] = []
        encoded: list[bytes] = []
        size = 0
        packed: dict[str, bytes] = {}
        for i in range(start, len(messages)):
            if pause_every and i > start and (i - start) % pause_every == 0:
                yield
            msg = messages[i]
            data = _encoder.encode(msg)
            run.append(msg)
            encoded.append(data)
            size += len(data)
            if (
                ends_chunk(msg.id)
                or len(run) >= MAX_CHUNK_MESSAGES
                or size >= MAX_CHUNK_BYTES
            ):
                digest, data = _pack(encoded)
                packed[digest] = data
                closed.append((digest, run))
                start = i + 1
                run, encoded, size = [], [], 0
        self._previous = list(messages)
        self._closed, self._closed_upto = closed, start
        if run:
            digest, data = _pack(encoded)
            packed[digest] = data
            self.packed = packed
            return [*closed, (digest, run)]
        self.packed = packed
        return list(closed)


def pack_chunk(messages: Sequence[Msg]) -> tuple[str, bytes]:
    """Encode one chunk: ``(sha256 hex, bytes)``."""
    return _pack([_encoder.encode(m) for m in messages])


def _pack(encoded: list[bytes]) -> tuple[str, bytes]:
    # A msgpack array header followed by the already-encoded messages.
    n = len(encoded)
    header = bytes([144 | n]) if n < 16 else b"\xdc" + n.to_bytes(2, "big")
    data = header + b"".join(encoded)
    return hashlib.sha256(data).hexdigest(), data


def decode_chunk(data: bytes | memoryview) -> list[Msg]:
    """Decode one chunk's messages.

    Raises:
        msgspec.DecodeError: The bytes are not a chunk, or nest too deeply to
            decode (which only data written without the append checks can).
    """
    try:
        return _chunk_decoder.decode(data)
    except RecursionError:
        raise msgspec.DecodeError("chunk is nested too deeply to decode") from None


LOG_SPANS = ("dense", "never", "always")
"""When checkpoints name log spans instead of writing chunk blobs (``log_spans=``).

``"dense"`` (the default): on stores that read records in bulk (local segment
files), while the thread holds at most :data:`SPAN_MAX_RECORDS` records, for chunks
whose records add at least :data:`SPAN_MIN_DENSITY` messages each on average
(records of two messages or more qualify whatever the chunk's edges cut off), such
as turns appended whole: each such message is stored once, and loads read it from
its record. ``"never"``: chunk blobs only, each message stored twice (its record, a
chunk). ``"always"``: a span for every chunk whose records are known, on any store
and at any length (on S3 a load then reads those records, one request each).

Measured on the peers' workload (``benchmarks/RESULTS.md``, ``RESULTS-commit.md``):
spans cut the bytes of 1,000 turns from 2.7x their text to 1.5x (1.45x to 0.95x
with ``compression="zstd"``) and cost a decode per record on every load: about
1.5x the load time of blobs for turns appended whole, several times for an agent
run's records (about one message each), hence the density and length limits.
"""

SPAN_MIN_DENSITY = 1.5
"""Messages per record a span needs under ``log_spans="dense"``.

Reading a span costs a decode per record on top of each message's, so a span over
records that each add one message (an agent run's: run start, tool call, tool
result, answer) loads several times slower than a blob; over a turn appended as one
record of four messages it costs about half again (``benchmarks/bench_commit.py``).
"""


SPAN_MAX_RECORDS = 1024
"""The longest thread, in records, whose checkpoints name spans under ``"dense"``.

A local log segment's records: it bounds what spans add to a load (decoding at most
this many records beyond what blobs cost, about 10-15 ms here). Past it, the
thread's checkpoints name no new spans and copy the chunks earlier ones named into
blobs, :data:`SPAN_REWRITES` a checkpoint, so a long thread loads as fast as
without spans, and stores its messages twice as it did.
"""

SPAN_REWRITES = 8
"""Chunks named as spans that one checkpoint past :data:`SPAN_MAX_RECORDS` copies
into blobs.

About 500 messages. Copying all of a 1,024-record thread's at once (some 60 chunks,
a megabyte) made the turns around that checkpoint take 4-6 ms against their usual
0.45 (they waited on the event loop while it packed and wrote them); eight a
checkpoint, the copies spread over the next few checkpoints and each is packed
between two turns.
"""


def check_log_spans(value: str) -> str:
    """``value`` if it is one of :data:`LOG_SPANS`.

    Raises:
        ValueError: It is not.
    """
    if value not in LOG_SPANS:
        raise ValueError(
            f"log_spans must be one of {', '.join(LOG_SPANS)}, not {value!r}"
        )
    return value


_LOG_REF = re.compile(
    r"@([1-9][0-9]{0,19})\.(0|[1-9][0-9]{0,9})\.([1-9][0-9]{0,19})\."
    r"([1-9][0-9]{0,9})\.([0-9a-f]{64})"
)


class LogSpan(msgspec.Struct, frozen=True):
    """A checkpoint chunk read from the log instead of a blob.

    The chunk is the ``count`` messages that the records ``first`` to ``last``
    add to the context (a ``MessageAppended`` its message, a
    ``ToolCallCompleted`` its tool message: see
    :func:`projections.agent_state.message_added`), in order, after the first
    ``skip`` of them. ``digest`` is the SHA-256 the chunk has as a blob (of
    :func:`pack_chunk`'s bytes), so a chunk has one identity however it is
    stored; ``verify`` checks it against the log.

    In a checkpoint's chunk list it is the text
    ``@<first>.<skip>.<last>.<count>.<digest>`` (:meth:`ref`); a blob reference
    is the bare digest.
    """

    first: int
    skip: int
    last: int
    count: int
    digest: str

    def ref(self) -> str:
        """The reference as a checkpoint lists it."""
        return f"@{self.first}.{self.skip}.{self.last}.{self.count}.{self.digest}"

    @classmethod
    def parse(cls, ref: str) -> LogSpan | None:
        """The span a reference names; None for a blob reference.

        Raises:
            ValueError: It starts like a span (``@``) but is not a valid one.
        """
        if not ref.startswith("@"):
            return None
        found = _LOG_REF.fullmatch(ref)
        if found is None:
            raise ValueError(f"malformed log span reference {ref[:120]!r}")
        first, skip, last, count = map(int, found.group(1, 2, 3, 4))
        if last < first:
            raise ValueError(f"log span reference {ref[:120]!r} ends before it starts")
        return cls(first, skip, last, count, found.group(5))


def ref_digest(ref: str) -> str:
    """The chunk digest of a checkpoint's chunk reference, blob or log span."""
    return ref[-64:] if ref.startswith("@") else ref
