"""One thread's objects on an object store: the only code that does a thread's I/O.

:class:`ThreadLog` publishes and reads records, blobs, checkpoints, the
``LAST_CHECKPOINT`` hint, the ``RETENTION`` marker and the ``LEASE``; the keys come
from :mod:`journal.layout`. :meth:`ThreadLog.scan` is the one place that checks that
records are contiguous and hash-chained: loading, ``records`` and ``verify`` all read
through it.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import TYPE_CHECKING, cast

import msgspec

from journal import codec, compression, crypto
from journal import events as ev
from journal.checkpoint import decode_chunk
from journal.engine.lease import (
    LeaseRead,
    LeaseRecord,
    LeaseState,
    acquire_lease,
    inspect_lease,
    read_lease,
    write_lease,
)
from journal.errors import (
    CorruptRecordError,
    EncryptionError,
    KeyUnavailableError,
    ObjectExistsError,
    ObjectNotFoundError,
)
from journal.keyring import ThreadCipher, owner_of
from journal.keys import is_hashed, key_ids
from journal.layout import (
    DURABLE_CURSOR_DIR,
    DURABLE_QUEUE_DIR,
    ThreadLayout,
    encode_hint,
    parse_hint,
    version_name,
    version_of,
)
from journal.loopless import pause

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Sequence

    from journal.engine.thread_index import ThreadIndex
    from journal.keyring import Keyring, OwnerKeys
    from journal.keys import ThreadKey
    from journal.seals import Signer
    from journal.store import ObjectStore, Quarantined

__all__ = [
    "READ_BATCH",
    "ChainBrokenError",
    "DowngradeError",
    "RetentionMarker",
    "ScanProblem",
    "ThreadLog",
    "chain_broken_at",
    "checked_blob",
]

READ_BATCH = 256
"""Records read per batch (one ``read_many``)."""


class ChainBrokenError(CorruptRecordError):
    """A record's ``prev_hash`` is not the hash of the record before it."""


class DowngradeError(CorruptRecordError):
    """A plain record where the thread's records are encrypted already.

    Writers never write one: once a record is encrypted, every later one is, and a
    writer without the keys cannot rebuild the thread to go on. Such a record was
    made without the keys (by someone who can write the storage), and its content
    is not authenticated.
    """


DOWNGRADE = (
    "unencrypted record after an encrypted one: written without the thread's "
    "keys, refused"
)
"""What :class:`DowngradeError` says of the record."""


def chain_broken_at(version: int) -> str:
    """What is wrong with record ``version`` whose ``prev_hash`` does not chain."""
    return f"hash chain broken: prev_hash does not match version {version - 1}"


class ScanProblem(msgspec.Struct, frozen=True):
    """What :meth:`ThreadLog.audit` found wrong at one version.

    Attributes:
        version: The version concerned.
        kind: ``"missing"`` (not listed), ``"vanished"`` (listed, then gone),
            ``"corrupt"`` (fails its own checks) or ``"chain"`` (its ``prev_hash``
            is not the previous record's hash; its own checks passed).
        message: What is wrong, readable.
        size: Bytes of the record read (0 when none could be read).
    """

    version: int
    kind: str
    message: str
    size: int = 0


class RetentionMarker(msgspec.Struct, frozen=True):
    """``RETENTION``: records before ``checkpoint`` were removed on purpose.

    Attributes:
        first_retained: The lowest version kept (the checkpoint's own record).
        checkpoint: The checkpoint that readers must start from (or after).
        removed_at: When the removal was decided (wall clock).
        key: The thread's ids (``namespace``, ``agent_id``, ``user_id``,
            ``session_id``, ``thread_id``), which its ``ThreadCreated`` at version
            1 held: listing names a thread whose path hashes a long id by them
            once that record is gone. Absent in markers of earlier versions.
    """

    first_retained: int
    checkpoint: int
    removed_at: float
    key: dict[str, str | None] | None = None


_marker_decoder = msgspec.json.Decoder(RetentionMarker)


def decode_retention(data: bytes | memoryview) -> RetentionMarker:
    """A ``RETENTION`` marker's bytes, decoded.

    Raises:
        msgspec.DecodeError: They are not a marker.
    """
    return _marker_decoder.decode(data)


def checked_blob(
    stored: bytes | memoryview, digest: str, limit: int | None = None
) -> bytes | memoryview | None:
    """A blob's bytes, decompressed if they were stored so, if they match ``digest``.

    ``limit``: the most bytes the blob may hold (the kind of blob bounds it);
    None for no bound but :data:`compression.MAX_SIZE`.

    Returns:
        The bytes, or None when they do not match (or a compressed frame is damaged).

    Raises:
        FrameTooLargeError: Compressed, it holds more than ``limit`` bytes (it is
            not decompressed).
        CompressionUnavailableError: The blob is compressed; zstandard is missing.
    """
    data: bytes | memoryview | None = stored
    if compression.is_compressed(stored):
        try:
            data = compression.decompress(
                stored, compression.MAX_SIZE if limit is None else limit
            )
        except compression.FrameTooLargeError:
            if limit is not None:
                raise
            data = None
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
        keyring: The journal's data keys; reading encrypted objects needs it.
        encrypt: Whether what this log writes is encrypted (needs ``keyring``).
    """

    def __init__(
        self,
        store: ObjectStore,
        key: ThreadKey,
        compress: Callable[[bytes], bytes] | None = None,
        keyring: Keyring | None = None,
        *,
        encrypt: bool = False,
    ) -> None:
        self.store = store
        self.key = key
        self.compress = compress
        self.label = str(key)
        self.layout = layout = ThreadLayout.of(key)
        self.prefix = layout.prefix
        self.cipher = ThreadCipher(keyring, layout.prefix) if keyring else None
        self.encrypt = encrypt and self.cipher is not None
        self.keyed = keyring is not None and keyring.provider is not None
        """The journal has a key provider: reads refuse what skips encryption
        after an encrypted record (:class:`DowngradeError`). A journal without
        one reads encrypted threads as stored and checks no such order."""
        self.seal_dir = f"{layout.prefix}/seals/"
        self.signer: Signer | None = None
        """Signs a seal at every checkpoint this log stores (set by its journal)."""
        self.index: ThreadIndex | None = None
        """The store's thread index, which a new thread joins before its LEASE."""
        self.log_dir = layout.log_dir
        self.checkpoint_dir = layout.checkpoint_dir
        self.blob_dir = layout.blob_dir
        self.lease_key = layout.lease_key
        self.hint_key = layout.hint_key
        self.retention_key = layout.retention_key
        self.ids_key = layout.ids_key
        self.record_key = layout.record_key
        self.checkpoint_key = layout.checkpoint_key
        self.blob_key = layout.blob_key
        self.index_key = layout.index_key

    # --- listing ----------------------------------------------------------------

    async def versions(self, after: int = 0) -> list[int]:
        """Record versions present after ``after``, ascending (one LIST)."""
        start = self.record_key(after) if after > 0 else None
        keys = await self.store.list(self.log_dir, start_after=start)
        return [v for k in keys if (v := version_of(k)) is not None]

    async def tail(
        self, after: int = 0, *, read: int = READ_BATCH
    ) -> tuple[list[int], list[bytes | None]]:
        """:meth:`versions`, with the stored bytes of the first ``read`` of them.

        One round trip where the store can list and read at once; the bytes go to
        :meth:`scan` as ``first``.

        Returns:
            The versions, ascending, and the bytes of the first ones (None for a
            record deleted after it was listed).
        """
        start = self.record_key(after) if after > 0 else None
        keys, data = await self.store.list_and_read(
            self.log_dir, start_after=start, limit=read
        )
        versions = [version_of(k) for k in keys]
        if None in versions:  # names in the log that are not records (rare)
            data = [d for v, d in zip(versions, data, strict=False) if v is not None]
        found = [v for v in versions if v is not None]
        return found, data[: len(found)]

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
        if self.encrypt:
            cipher = self._writing_cipher()
            await cipher.writable()
            key_id, encrypt = cipher.record_encrypter(version)
            # Replaces encoded.data and encoded.hash with the stored form's: the
            # writer chains the next record on what readers will hash.
            codec.seal_record(encoded, version=version, key_id=key_id, encrypt=encrypt)
        await self.put_blobs(list(encoded.blobs.items()))
        await self.store.create(self.record_key(version), encoded.data)

    def _writing_cipher(self) -> ThreadCipher:
        assert self.cipher is not None  # noqa: S101 - encrypt implies a cipher
        return self.cipher

    async def keys(self) -> OwnerKeys | None:
        """The thread owner's data keys as loaded (None: no keyring)."""
        return None if self.cipher is None else await self.cipher.load()

    def _no_keyring(self) -> KeyUnavailableError:
        return KeyUnavailableError(
            owner_of(self.prefix), "", "the journal was opened without encryption"
        )

    async def _reading_cipher(self) -> ThreadCipher:
        if self.cipher is None:
            raise self._no_keyring()
        await self.cipher.load()
        return self.cipher

    async def parse(
        self, data: bytes, version: int, *, strict: bool = True
    ) -> codec.ParsedRecord:
        """Check (and decrypt) one record's stored bytes.

        An encrypted record is decrypted when the owner's keys can be had. Without
        them, ``strict`` raises why (``ErasedError``, ``KeyUnavailableError``);
        otherwise the record comes back ``sealed``, checked as stored.

        Raises:
            CorruptRecordError: It fails a check.
            EncryptionError: ``strict``, and it cannot be decrypted.
        """
        if not codec.is_encrypted_record(data):
            return codec.parse_record(data, label=self.label, version=version)
        if self.cipher is None:
            if strict:
                raise self._no_keyring()
            return codec.parse_record(data, label=self.label, version=version)
        cipher = self.cipher
        try:
            # Inside: a key object that does not decode is a key not to be had,
            # which a lenient read (verify) reports instead of raising.
            await cipher.load()
            return await cipher.opening(
                lambda: codec.parse_record(
                    data, label=self.label, version=version, opener=cipher.open_record
                )
            )
        except EncryptionError:
            if strict:
                raise
            return codec.parse_record(data, label=self.label, version=version)

    async def put_blobs(
        self,
        blobs: Sequence[tuple[str, bytes]],
        *,
        derived: bool = False,
        index: bool = False,
        limit: int | None = None,
    ) -> None:
        """Create several content-addressed blobs in one batch (existing ones stay).

        ``derived`` blobs (a checkpoint's chunks) need not be durable when this
        returns: see :meth:`ObjectStore.create_derived` and :meth:`flush_blobs`.
        ``index``: they are chunk index blobs (:meth:`index_key`). ``limit``: the
        most bytes readers decompress a blob of this kind to (see
        :func:`checked_blob`); a longer one is stored uncompressed, which costs no
        decompression to read.
        """
        if not blobs:
            return
        key = self.index_key if index else self.blob_key
        items = []
        if self.encrypt:
            await self._writing_cipher().writable()
        for digest, data in blobs:
            stored = data
            if self.compress is not None and (limit is None or len(data) <= limit):
                stored = self.compress(data)
                await pause()  # ~0.1 ms a chunk: let commits in between
            if self.encrypt:
                stored = self._writing_cipher().seal(crypto.BLOB_MAGIC, digest, stored)
            items.append((key(digest), stored))
        if derived:
            await self.store.create_many_derived(items)
        else:
            await self.store.create_many(items)

    async def flush_blobs(self, digests: Iterable[str], *, index: bool = False) -> None:
        """Make blobs written as derived durable (before a record references them)."""
        key = self.index_key if index else self.blob_key
        keys = [key(d) for d in dict.fromkeys(digests)]
        if keys:
            await self.store.flush(keys)

    async def flush_checkpoint(
        self, version: int, chunks: Iterable[str], indexes: Iterable[str] = ()
    ) -> None:
        """Make the checkpoint at ``version`` and what it names durable (retention).

        ``chunks`` are the checkpoint's references, flat (log spans name records,
        which are durable already), and ``indexes`` the digests of its chunk index
        blobs.
        """
        await self.flush_blobs(c for c in chunks if not c.startswith("@"))
        await self.flush_blobs(indexes, index=True)
        await self.store.flush([self.checkpoint_key(version)])

    async def read_parsed(self, version: int) -> codec.ParsedRecord:
        """Read and verify one record.

        With a key provider (:attr:`keyed`), a plain record is refused when the
        thread's first record or the one before it is encrypted (one more read,
        for plain records only).

        Raises:
            ObjectNotFoundError: No record at ``version``.
            CorruptRecordError: It fails a check (``DowngradeError``: a plain
                record after an encrypted one).
        """
        data, _ = await self.store.read(self.record_key(version))
        parsed = await self.parse(data, version)
        if self.keyed and not parsed.encrypted and await self.encrypted_before(version):
            raise DowngradeError(self.label, version, DOWNGRADE)
        return parsed

    async def encrypted_before(self, version: int) -> bool:
        """Whether a plain record at ``version`` follows an encrypted one.

        True when the thread's first record or the one before ``version`` is
        encrypted: then a plain record at ``version`` is no writer's. One
        ``read_many`` of those two records; a missing one (retention removed it)
        tells nothing. The first record too, since a plain record can follow
        forged ones: it settles the question for a thread encrypted from its start.
        A thread whose first records are plain (written before encryption was
        turned on) can still be given several forged records in a row after its
        encrypted ones; a read of the log from the start refuses them.
        """
        if version <= 1:
            return False
        wanted = [1] if version == 2 else [1, version - 1]
        found = await self.store.read_many([self.record_key(v) for v in wanted])
        return any(d is not None and codec.is_encrypted_record(d) for d in found)

    async def check_blob(
        self, stored: bytes | memoryview, digest: str, *, limit: int | None = None
    ) -> bytes | memoryview | None:
        """A blob's bytes (decrypted, decompressed) if they match ``digest``.

        ``limit``: the most bytes a blob of its kind holds (see
        :func:`checked_blob`).

        Raises:
            CorruptRecordError: Compressed, it holds more than ``limit`` bytes.
            ErasedError, KeyUnavailableError: It is encrypted and its key cannot be
                had.
        """
        if crypto.is_container(stored, crypto.BLOB_MAGIC):
            cipher = await self._reading_cipher()
            sealed = bytes(stored)
            try:
                stored = await cipher.opening(
                    lambda: cipher.open(crypto.BLOB_MAGIC, digest, sealed)
                )
            except ValueError:
                return None
        try:
            return checked_blob(stored, digest, limit)
        except compression.FrameTooLargeError as exc:
            raise CorruptRecordError(
                self.label, None, f"blob {digest}: {exc}"
            ) from None

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
        return cast("dict[str, bytes]", await self._read_blobs(digests, owners))

    async def read_stored_blobs(
        self, digests: Sequence[str]
    ) -> dict[str, bytes | memoryview]:
        """Blobs' stored bytes, unchecked, for a caller that checks them one by one.

        A checkpoint's chunks are checked (:meth:`check_blob`) and decoded one at a
        time, so that only one is held decompressed at once. Blobs a store read
        together may come back as views of one buffer
        (:meth:`ObjectStore.read_buffers`): a cold load of a long thread reads its
        chunks' segment once and copies none of them.

        Raises:
            CorruptRecordError: A blob is missing.
        """
        unique = list(dict.fromkeys(digests))
        raw = await self.store.read_buffers([self.blob_key(d) for d in unique])
        out: dict[str, bytes | memoryview] = {}
        for digest, data in zip(unique, raw, strict=True):
            if data is None:
                raise CorruptRecordError(self.label, None, f"blob {digest} is missing")
            out[digest] = data
        return out

    async def _read_blobs(
        self,
        digests: Sequence[str],
        owners: dict[str, int] | None,
    ) -> dict[str, bytes | memoryview]:
        unique = list(dict.fromkeys(digests))
        raw = await self.store.read_many([self.blob_key(d) for d in unique])
        out: dict[str, bytes | memoryview] = {}
        for digest, data in zip(unique, raw, strict=True):
            version = (owners or {}).get(digest)
            if data is None:
                raise CorruptRecordError(
                    self.label, version, f"blob {digest} is missing"
                )
            blob = await self.check_blob(data, digest)
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
        owners = {
            e.blob: p.body.version
            for p in parsed
            for e in p.body.events
            if e.blob is not None
        }
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

    async def read_blobs_raw(
        self, digests: Sequence[str], *, index: bool = False
    ) -> list[bytes | None]:
        """The stored bytes of blobs, unchecked (None for a missing one).

        ``index``: chunk index blobs (:meth:`index_key`).
        """
        key = self.index_key if index else self.blob_key
        return await self.store.read_many([key(d) for d in digests])

    async def read_retention(self) -> RetentionMarker | None:
        """The retention marker, or None when nothing was removed.

        Raises:
            CorruptRecordError: The marker exists but does not decode.
        """
        # read_many: a missing object is None, not an exception carried back
        # from the store's worker thread.
        (data,) = await self.store.read_many([self.retention_key])
        if data is None:
            return None
        try:
            return decode_retention(data)
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

    async def head(self) -> int:
        """The thread's head version (0 for a thread with no records).

        Reads the hint and lists after it; lists the whole log only without one.
        """
        hint = await self.read_hint()
        if hint:
            after = await self.versions(hint)
            if after:
                return after[-1]
            if await self.exists(hint):
                return hint
        versions = await self.versions()
        return versions[-1] if versions else 0

    # --- scanning ---------------------------------------------------------------

    def scan(
        self,
        versions: Sequence[int],
        *,
        after: int,
        prev_hash: bytes | None,
        first: Sequence[bytes | None] = (),
        sealed: bool | None = None,
    ) -> AsyncIterator[list[codec.ParsedRecord]]:
        """Read ``versions``, checking that they follow ``after`` with no gap.

        Checks contiguity before reading anything (so a gap raises here, at the
        call), then reads in batches of :data:`READ_BATCH` and checks each record
        and the hash chain: the first record against ``prev_hash`` (None: not
        checked), each later one against the record before it. ``first`` holds
        the stored bytes of the first versions when the caller read them already
        (see :meth:`tail`).

        With a key provider (:attr:`keyed`), a plain record after an encrypted one
        is refused. ``sealed`` says whether what comes before ``after + 1`` counts
        as encrypted: True (an encrypted checkpoint), False (the genesis, or what
        the caller checked), None to find out (:meth:`encrypted_before`, read
        only if the first record is plain).

        Raises:
            CorruptRecordError: A version is missing or a record fails a check
                (``ChainBrokenError`` when the chain is broken, ``DowngradeError``
                for a plain record after an encrypted one).
        """
        expected = after + 1
        for version in versions:
            if version != expected:
                raise CorruptRecordError(self.label, expected, "record is missing")
            expected += 1
        # Strict mode raises instead of yielding a problem, so the batches hold
        # parsed records only.
        return cast(
            "AsyncIterator[list[codec.ParsedRecord]]",
            self._walk(
                versions, after, prev_hash, strict=True, first=first, sealed=sealed
            ),
        )

    def audit(
        self, versions: Sequence[int], *, after: int, prev_hash: bytes | None
    ) -> AsyncIterator[list[codec.ParsedRecord | ScanProblem]]:
        """Like :meth:`scan`, but report what is wrong instead of raising.

        Every version from ``after + 1`` to the last one listed appears once, in
        order: as its parsed record, or as a :class:`ScanProblem` (missing, vanished,
        corrupt); a record whose ``prev_hash`` does not match the record listed
        before it is preceded by a problem saying so. A broken chain is reported only
        where the previous record was read intact (a gap or a damaged record is
        reported once, where it is).
        """
        return self._walk(versions, after, prev_hash, strict=False, sealed=None)

    async def _walk(
        self,
        versions: Sequence[int],
        after: int,
        prev_hash: bytes | None,
        *,
        strict: bool,
        first: Sequence[bytes | None] = (),
        sealed: bool | None,
    ) -> AsyncIterator[list[codec.ParsedRecord | ScanProblem]]:
        listed = set(versions)
        expected = after + 1
        prev = prev_hash
        # Whether an encrypted record came before (None: not known yet). Without
        # a key provider it stays False: a plain journal's walk does no more
        # than before, one test per record.
        keyed = self.keyed
        if not keyed or after == 0:
            sealed = False
        for i in range(0, len(versions), READ_BATCH):
            batch = versions[i : i + READ_BATCH]
            if i == 0 and len(first) >= len(batch):
                raw = first[: len(batch)]
            else:
                raw = await self.store.read_many([self.record_key(v) for v in batch])
            out: list[codec.ParsedRecord | ScanProblem] = []
            for version, data in zip(batch, raw, strict=True):
                while expected < version:
                    out.append(ScanProblem(expected, "missing", "record is missing"))
                    expected += 1
                expected = version + 1
                if data is None:
                    if strict:
                        raise CorruptRecordError(
                            self.label, version, "record is missing"
                        )
                    out.append(
                        ScanProblem(
                            version, "vanished", "record vanished while verifying"
                        )
                    )
                    prev = None  # unknown: the next record's chain cannot be judged
                    continue
                try:
                    if codec.is_encrypted_record(data):
                        sealed = keyed
                        parsed = await self.parse(data, version, strict=strict)
                    else:
                        # A clear record needs no keys: parsed without a coroutine.
                        parsed = codec.parse_record(
                            data, label=self.label, version=version
                        )
                        if sealed is not False:
                            if sealed is None:
                                sealed = await self.encrypted_before(version)
                            if sealed:
                                raise DowngradeError(self.label, version, DOWNGRADE)
                except CorruptRecordError as exc:
                    if strict:
                        raise
                    out.append(ScanProblem(version, "corrupt", str(exc), len(data)))
                    # Its hash is unknown, so the next record's chain cannot be
                    # judged: the damage is reported once, here.
                    prev = None
                    continue
                if (
                    prev is not None
                    and parsed.body.prev_hash != prev
                    and (version - 1 == after or version - 1 in listed)
                ):
                    message = chain_broken_at(version)
                    if strict:
                        raise ChainBrokenError(self.label, version, message)
                    out.append(ScanProblem(version, "chain", message))
                out.append(parsed)
                prev = parsed.hash
            yield out

    # --- checkpoints, hint, retention -------------------------------------------

    async def read_checkpoint(self, version: int) -> bytes:
        """The stored bytes of the checkpoint at ``version`` (decrypted).

        Raises:
            ObjectNotFoundError: There is none.
        """
        return (await self.open_checkpoint(version))[0]

    async def open_checkpoint(self, version: int) -> tuple[bytes, bool]:
        """The checkpoint at ``version``, decrypted, and whether it was encrypted.

        A plain one read with a key provider must pass
        :meth:`check_plain_checkpoint` before it is believed.

        Raises:
            ObjectNotFoundError: There is none.
        """
        # Not ``read``: its etag (a digest of the bytes) is of no use here.
        key = self.checkpoint_key(version)
        (found,) = await self.store.read_many([key])
        if found is None:
            raise ObjectNotFoundError(key)
        data = found
        if crypto.is_container(data, crypto.CHECKPOINT_MAGIC):
            cipher = await self._reading_cipher()
            name = version_name(version)
            try:
                data = await cipher.opening(
                    lambda: cipher.open(crypto.CHECKPOINT_MAGIC, name, found)
                )
            except ValueError as exc:
                raise ValueError(f"checkpoint {exc}") from None
            return data, True
        return data, False

    async def check_plain_checkpoint(
        self, version: int, record_hash: bytes
    ) -> codec.ParsedRecord:
        """Check that a plain checkpoint at ``version`` can be a writer's.

        Writers encrypt a checkpoint once records are encrypted, so with a key
        provider a plain one is believed only over a plain record (one a writer
        without keys could have written, before the thread was encrypted): the
        record at ``version``, with the hash the checkpoint names, neither the
        thread's first record nor the one before encrypted (see
        :meth:`encrypted_before`). One ``read_many`` of those three records.

        Returns:
            The record at ``version``, checked (its hash recomputed).

        Raises:
            ValueError: The checkpoint is not to be believed (a load skips it).
            CorruptRecordError: The record at ``version`` fails a check.
        """
        wanted = sorted({1, max(version - 1, 1), version})
        found = dict(
            zip(
                wanted,
                await self.store.read_many([self.record_key(v) for v in wanted]),
                strict=True,
            )
        )
        data = found[version]
        if data is None:
            raise ValueError(
                f"checkpoint {version} is not encrypted and covers no record"
            )
        if any(d is not None and codec.is_encrypted_record(d) for d in found.values()):
            raise ValueError(
                f"checkpoint {version} is not encrypted but the thread's records "
                "are: written without the thread's keys, refused"
            )
        parsed = codec.parse_record(data, label=self.label, version=version)
        if parsed.hash != record_hash:
            raise ValueError(
                f"checkpoint {version} is not encrypted and names a record hash "
                "that is not the log's"
            )
        return parsed

    async def create_checkpoint(self, version: int, data: bytes) -> bool:
        """Create the checkpoint at ``version`` unless one exists (it is derived).

        Not synced (:meth:`ObjectStore.create_derived`): a checkpoint's syncs
        would queue the commits made meanwhile behind them, and one lost to a
        power cut costs only a longer replay. Retention flushes the one it keeps.

        Returns:
            Whether it was created (False: one was there, and stays).
        """
        if self.encrypt:
            cipher = self._writing_cipher()
            await cipher.writable()
            data = cipher.seal(crypto.CHECKPOINT_MAGIC, version_name(version), data)
        return await self.store.create_derived(self.checkpoint_key(version), data)

    async def rewrite_checkpoint(self, version: int, data: bytes) -> None:
        """Replace the checkpoint at ``version`` with ``data``, durably (retention).

        Raises:
            ObjectNotFoundError: There is none.
            PreconditionFailedError: It changed while being replaced.
        """
        key = self.checkpoint_key(version)
        _, etag = await self.store.read(key)
        if self.encrypt:
            cipher = self._writing_cipher()
            await cipher.writable()
            data = cipher.seal(crypto.CHECKPOINT_MAGIC, version_name(version), data)
        await self.store.replace(key, data, if_match=etag)

    async def delete_checkpoint(self, version: int) -> None:
        """Delete the checkpoint at ``version`` (retention)."""
        await self.store.delete(self.checkpoint_key(version))

    async def delete_record(self, version: int) -> None:
        """Delete the record at ``version`` (retention, below its checkpoint only)."""
        await self.store.delete(self.record_key(version))

    async def read_hint(self) -> int:
        """The version the ``LAST_CHECKPOINT`` hint names; 0 when absent or garbled."""
        (data,) = await self.store.read_many([self.hint_key])
        return 0 if data is None else parse_hint(data)

    async def put_hint(self, version: int) -> None:
        """Point the hint at ``version`` (no sync: a lost hint costs only time)."""
        await self.store.put_hint(self.hint_key, encode_hint(version))

    async def write_hint(self, version: int) -> None:
        """Point the hint at ``version``, durably (retention relies on it)."""
        await self.store.replace(self.hint_key, encode_hint(version), if_match=None)

    async def write_retention(self, marker: RetentionMarker) -> None:
        """Write the ``RETENTION`` marker (before anything is removed)."""
        await self.store.replace(
            self.retention_key, msgspec.json.encode(marker), if_match=None
        )

    # --- seals ------------------------------------------------------------------

    def seal_key(self, version: int) -> str:
        """The key of the seal at ``version``."""
        return f"{self.seal_dir}{version_name(version)}.seal"

    async def put_seal(self, version: int, data: bytes) -> None:
        """Create the seal at ``version`` unless one exists."""
        with contextlib.suppress(ObjectExistsError):
            await self.store.create(self.seal_key(version), data)

    async def read_seals(self) -> list[tuple[str, bytes]]:
        """Every seal object: ``(key, bytes)``, oldest version first."""
        keys = [k for k in await self.store.list(self.seal_dir) if k.endswith(".seal")]
        raw = await self.store.read_many(keys)
        return [(k, d) for k, d in zip(keys, raw, strict=True) if d is not None]

    async def erase(self) -> None:
        """Delete every object of the thread (:func:`erase_thread`)."""
        await erase_thread(self.store, self.layout)

    async def remove_leftovers(self, older_than: float) -> int:
        """Delete temporary files of interrupted writes older than ``older_than`` s."""
        return await self.store.remove_leftovers(self.prefix, older_than=older_than)

    async def leftovers(self) -> list[str]:
        """Temporary files that interrupted writes left under the thread."""
        return await self.store.leftovers(self.prefix)

    async def quarantined(self) -> list[Quarantined]:
        """Bytes the store cut from damaged file tails under the thread, kept aside."""
        return await self.store.quarantined(self.prefix)

    # --- lease ------------------------------------------------------------------

    async def read_lease(self) -> tuple[LeaseRecord | None, str]:
        """The ``LEASE`` record and its etag; ``(None, "")`` when there is none.

        A damaged ``LEASE`` reads as an expired lease of holder "" that keeps the
        epoch it still names (see :func:`journal.engine.lease.read_lease`).
        """
        return await read_lease(self.store, self.lease_key)

    async def inspect_lease(self) -> LeaseRead:
        """``LEASE`` with what was wrong with it, if anything (for ``verify``)."""
        return await inspect_lease(self.store, self.lease_key)

    async def write_lease(
        self, record: LeaseRecord, etag: str | None, *, durable: bool = True
    ) -> str:
        """Compare-and-swap ``LEASE`` to ``record``; return the new etag.

        ``etag=None`` creates it (``ObjectExistsError`` if it exists); see
        :func:`journal.engine.lease.write_lease` for ``durable``.

        Raises:
            PreconditionFailedError: ``etag`` is no longer current.
            ObjectNotFoundError: ``LEASE`` vanished.
        """
        return await write_lease(
            self.store, self.lease_key, record, etag, durable=durable
        )

    async def acquire_lease(
        self,
        *,
        holder: str,
        ttl: float,
        wait: float,
        clock: Callable[[], float],
    ) -> LeaseState:
        """Take ``LEASE`` at the next epoch (see :mod:`journal.engine.lease`).

        Raises:
            LeaseHeldError: Another holder's lease is live past ``wait``.
        """
        return await acquire_lease(
            self.store,
            self.lease_key,
            label=self.label,
            holder=holder,
            ttl=ttl,
            wait=wait,
            clock=clock,
            before_create=self._before_lease,
        )

    async def _before_lease(self) -> None:
        """What a thread's first object (its ``LEASE``) needs stored before it.

        Its index entry, and where its path hashes a long id, its ``IDS``: until its
        first record lands (a writer may die before) and once retention removed
        it, nothing else names such a thread.
        """
        if self.index is not None:
            await self.index.register(self.prefix)
        if any(map(is_hashed, self.key.segments)):
            with contextlib.suppress(ObjectExistsError):
                await self.store.create(
                    self.ids_key, msgspec.json.encode(key_ids(self.key))
                )


async def erase_thread(store: ObjectStore, layout: ThreadLayout) -> None:
    """Delete every object of the thread at ``layout``, its ``LEASE`` last.

    By path: a thread whose key cannot be named (see
    :func:`journal.engine.listing.name_threads`) is erased all the same. The lease
    goes last so that a writer acquiring meanwhile still fences.
    """
    for object_key in await store.list(layout.prefix + "/"):
        if object_key != layout.lease_key:
            await store.delete(object_key)
    await store.delete(layout.lease_key)


async def erase_durable(
    store: ObjectStore, pattern: tuple[str | None, ...]
) -> list[str]:
    """Delete the durable turns' entries and cursors of the threads ``pattern`` selects.

    ``pattern`` is a thread path's five segments, None where any matches (as
    :func:`journal.engine.listing.thread_paths` fixes them). Entries are found in
    every shard, also for a thread that has queued turns but no record yet.

    Returns:
        The prefixes of the threads whose entries or cursor were deleted.
    """
    found: set[str] = set()
    for path in await store.descendants(DURABLE_QUEUE_DIR, (None, *pattern)):
        prefix = "/".join(path[1:])
        for entry in await store.list(f"{DURABLE_QUEUE_DIR}{'/'.join(path)}/"):
            await store.delete(entry)
        found.add(prefix)
    # A cursor is an object named by the thread's prefix: its last segment is a
    # file of its session's directory.
    for path in await store.descendants(DURABLE_CURSOR_DIR, pattern[:-1]):
        for cursor in await store.list(f"{DURABLE_CURSOR_DIR}{'/'.join(path)}/"):
            thread = cursor.rpartition("/")[2]
            if pattern[-1] is None or thread == pattern[-1]:
                await store.delete(cursor)
                found.add("/".join((*path, thread)))
    return sorted(found)
