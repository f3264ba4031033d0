"""One thread's log on an object store: publishing, reading and resolving.

The keys come from :mod:`journal.layout`.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import TYPE_CHECKING

import msgspec

from journal import codec, compression
from journal import events as ev
from journal.checkpoint import decode_chunk
from journal.errors import CorruptRecordError, ObjectNotFoundError
from journal.layout import ThreadLayout, version_of

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from journal.keys import ThreadKey
    from journal.store import ObjectStore

__all__ = ["RetentionMarker", "ThreadLog", "checked_blob"]


class RetentionMarker(msgspec.Struct, frozen=True):
    """``RETENTION``: records before ``checkpoint`` were removed on purpose.

    Attributes:
        first_retained: The lowest version kept (the checkpoint's own record).
        checkpoint: The checkpoint that readers must start from (or after).
        removed_at: When the removal was decided (wall clock).
    """

    first_retained: int
    checkpoint: int
    removed_at: float


_marker_decoder = msgspec.json.Decoder(RetentionMarker)


def checked_blob(stored: bytes, digest: str) -> bytes | None:
    """A blob's bytes, decompressed if they were stored so, if they match ``digest``.

    Returns:
        The bytes, or None when they do not match (or a compressed frame is damaged).

    Raises:
        CompressionUnavailableError: The blob is compressed; zstandard is missing.
    """
    data: bytes | None = stored
    if compression.is_compressed(stored):
        try:
            data = compression.decompress(stored)
        except ValueError:
            data = None
    if data is None or hashlib.sha256(data).hexdigest() != digest:
        return None
    return data


class ThreadLog:
    """Storage operations of one thread. Stateless apart from its identity.

    Args:
        store: The object store.
        key: The thread.
        compress: Compresses the blobs this log writes (see
            :mod:`journal.compression`); reading handles either kind.
    """

    def __init__(
        self,
        store: ObjectStore,
        key: ThreadKey,
        compress: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self.compress = compress
        self.label = str(key)
        self.layout = layout = ThreadLayout.of(key)
        self.prefix = layout.prefix
        self.log_dir = layout.log_dir
        self.checkpoint_dir = layout.checkpoint_dir
        self.blob_dir = layout.blob_dir
        self.lease_key = layout.lease_key
        self.hint_key = layout.hint_key
        self.retention_key = layout.retention_key
        self.record_key = layout.record_key
        self.checkpoint_key = layout.checkpoint_key
        self.blob_key = layout.blob_key

    # --- listing ----------------------------------------------------------------

    async def versions(self, after: int = 0) -> list[int]:
        """Record versions present after ``after``, ascending (one LIST)."""
        start = self.record_key(after) if after > 0 else None
        keys = await self.store.list(self.log_dir, start_after=start)
        return [v for k in keys if (v := version_of(k)) is not None]

    async def checkpoint_versions(self) -> list[int]:
        """Checkpoint versions present, ascending."""
        keys = await self.store.list(self.checkpoint_dir)
        return [v for k in keys if (v := version_of(k)) is not None]

    # --- records ----------------------------------------------------------------

    async def publish(self, encoded: codec.EncodedRecord, version: int) -> None:
        """Write the record's blobs, then create the record exclusively.

        Raises:
            ObjectExistsError: The slot is taken; read it to decide what happened.
        """
        await self.put_blobs(list(encoded.blobs.items()))
        await self.store.create(self.record_key(version), encoded.data)

    async def put_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> None:
        """Create several content-addressed blobs in one batch (existing ones stay)."""
        if not blobs:
            return
        items = []
        for digest, data in blobs:
            stored = data
            if self.compress is not None:
                stored = self.compress(data)
                await asyncio.sleep(0)  # ~0.1 ms a chunk: let commits in between
            items.append((self.blob_key(digest), stored))
        await self.store.create_many(items)

    async def read_parsed(self, version: int) -> codec.ParsedRecord:
        """Read and verify one record.

        Raises:
            ObjectNotFoundError: No record at ``version``.
            CorruptRecordError: It fails a check.
        """
        data, _ = await self.store.read(self.record_key(version))
        return codec.parse_record(data, label=self.label, version=version)

    async def read_range(self, versions: Sequence[int]) -> list[codec.ParsedRecord]:
        """Read and verify several records (concurrently); a missing one is corrupt."""
        raw = await self.store.read_many([self.record_key(v) for v in versions])
        out = []
        for version, data in zip(versions, raw, strict=True):
            if data is None:
                raise CorruptRecordError(self.label, version, "record is missing")
            out.append(codec.parse_record(data, label=self.label, version=version))
        return out

    async def read_blobs(
        self, digests: Sequence[str], owners: dict[str, int] | None = None
    ) -> dict[str, bytes]:
        """Read blobs and check their hashes.

        Args:
            digests: The blobs' SHA-256 hex digests.
            owners: The version referencing each blob, named in errors.

        Raises:
            CorruptRecordError: A blob is missing or does not match its hash.
        """
        unique = list(dict.fromkeys(digests))
        raw = await self.store.read_many([self.blob_key(d) for d in unique])
        out: dict[str, bytes] = {}
        for digest, data in zip(unique, raw, strict=True):
            version = (owners or {}).get(digest)
            if data is None:
                raise CorruptRecordError(
                    self.label, version, f"blob {digest} is missing"
                )
            blob = checked_blob(data, digest)
            if blob is None:
                raise CorruptRecordError(
                    self.label, version, f"blob {digest} does not match its hash"
                )
            out[digest] = blob
        return out

    async def materialize(
        self, parsed: Sequence[codec.ParsedRecord]
    ) -> list[codec.Record]:
        """Decode records, fetching their blobs and message chunks."""
        owners = {ref: p.body.version for p in parsed for ref in p.blob_refs}
        blobs = await self.read_blobs(list(owners), owners) if owners else {}
        with codec.gc_paused():
            records = [
                codec.materialize(p, label=self.label, blobs=blobs) for p in parsed
            ]
        chunk_owners = {
            digest: r.version
            for r in records
            for e in r.events
            if isinstance(e, ev.AgentStateReplaced)
            for digest in e.chunks
        }
        if not chunk_owners:
            return records
        chunks = await self.read_blobs(list(chunk_owners), chunk_owners)
        return [self._resolve_chunks(r, chunks) for r in records]

    async def materialize_one(self, parsed: codec.ParsedRecord) -> codec.Record:
        """Decode one record; only touches storage when it references blobs."""
        if not parsed.blob_refs:
            record = codec.materialize(parsed, label=self.label)
            if not any(
                isinstance(e, ev.AgentStateReplaced) and e.chunks for e in record.events
            ):
                return record
        return (await self.materialize([parsed]))[0]

    def _resolve_chunks(
        self, record: codec.Record, chunks: dict[str, bytes]
    ) -> codec.Record:
        if not any(
            isinstance(e, ev.AgentStateReplaced) and e.chunks for e in record.events
        ):
            return record
        resolved: list[object] = []
        for e in record.events:
            if isinstance(e, ev.AgentStateReplaced) and e.chunks:
                messages = list(e.messages)
                for digest in e.chunks:
                    try:
                        messages.extend(decode_chunk(chunks[digest]))
                    except msgspec.DecodeError as exc:
                        raise CorruptRecordError(
                            self.label, record.version, f"chunk {digest}: {exc}"
                        ) from None
                e = msgspec.structs.replace(e, messages=messages, chunks=[])
            resolved.append(e)
        return msgspec.structs.replace(record, events=resolved)

    async def read_retention(self) -> RetentionMarker | None:
        """The retention marker, or None when nothing was removed.

        Raises:
            CorruptRecordError: The marker exists but does not decode.
        """
        try:
            data, _ = await self.store.read(self.retention_key)
        except ObjectNotFoundError:
            return None
        try:
            return _marker_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise CorruptRecordError(
                self.label, None, f"RETENTION marker: {exc}"
            ) from None

    async def exists(self, version: int) -> bool:
        """Whether a record exists at ``version`` (one GET)."""
        try:
            await self.store.read(self.record_key(version))
        except ObjectNotFoundError:
            return False
        return True
