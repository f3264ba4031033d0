"""Verifying a thread: every check of :meth:`journal.Journal.verify`, one method each.

Reads everything and writes nothing: checksums, the hash chain and contiguity (through
:meth:`ThreadLog.audit`), epoch monotonicity, blobs, unknown event types, every
checkpoint (its state and its idempotency window) against a fresh replay, the
``LAST_CHECKPOINT`` hint, the ``RETENTION`` marker, the ``LEASE``, leftovers of
interrupted writes, and what the store quarantined (bytes cut from a torn-looking
tail that may hold an acknowledged record: a problem).
"""

from __future__ import annotations

import bisect
import struct
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from journal import codec
from journal import events as ev
from journal.checkpoint import (
    MAX_CHUNK_READ,
    ChunkEncoder,
    LogSpan,
    pack_chunk,
    ref_digest,
)
from journal.engine.batches import DIGEST_SIZE, IDEMPOTENCY_WINDOW, BatchWindow
from journal.engine.checkpoints import (
    check_body,
    expand_refs,
    read_checkpoint,
    read_spans,
    span_messages,
)
from journal.engine.lease import LEGACY_MAX_TTL, MAX_CLOCK_SKEW, untrusted_expiry
from journal.engine.log import ScanProblem
from journal.engine.sealing import check_seals
from journal.errors import (
    CompressionUnavailableError,
    CorruptRecordError,
    EncryptionError,
    ErasedError,
    ObjectNotFoundError,
    UnknownEventError,
)
from journal.layout import version_of
from projections.agent_state import AgentStateProjection, encode_state

if TYPE_CHECKING:
    from collections.abc import Callable

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from journal.engine.log import ThreadLog
    from journal.keys import ThreadKey
    from journal.seals import Seal
    from journal.store import Quarantined
    from projections.agent_state import AgentState

__all__ = ["Finding", "VerifyReport", "verify_thread"]

# Checkpoints and their chunks are written without a sync (derived data): what a
# power cut can do to one is a warning, not a problem.
_UNSYNCED = "checkpoint (derived, written unsynced)"
_SKIPPED = "loads skip it and replay the log"
_FRAME_HEAD = struct.Struct(">4sI")  # a checkpoint's magic and body length


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
            events, a lagging hint, a damaged or implausible ``LEASE``: the next
            writer replaces it, above every epoch in the log).
        head: The highest contiguous version read.
        records: How many records were read.
        checkpoints: How many checkpoints were compared with a fresh replay.
        bytes: Total bytes of the records read.
        encryption: ``"off"`` (no encrypted record), ``"on"`` (encrypted, and
            decrypted: content checked), ``"erased"`` (the owner's data keys were
            destroyed: structure checked, content gone) or ``"locked"`` (no usable
            key: structure checked only).
        sealed: The highest version a valid seal vouches for (0: none, or no
            ``trust`` key given).
        trusted: The id of the public key seals were checked with ("" if none).
    """

    key: ThreadKey
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    head: int = 0
    records: int = 0
    checkpoints: int = 0
    bytes: int = 0
    encryption: str = "off"
    sealed: int = 0
    trusted: str = ""

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


async def verify_thread(
    log: ThreadLog,
    clock: Callable[[], float] = time.time,
    *,
    trust: Ed25519PublicKey | None = None,
    anchor: Seal | None = None,
) -> VerifyReport:
    """Check a thread's integrity without writing anything.

    Args:
        log: The thread.
        clock: Wall clock (seconds), to judge the ``LEASE`` expiry by.
        trust: A public key: the history must extend the last seal it signed (see
            :mod:`journal.seals`).
        anchor: A seal kept elsewhere that the history must extend too (needs
            ``trust``).
    """
    verifier = _Verifier(log, clock)
    report = await verifier.run()
    if trust is not None:
        await verifier.check_trust(trust, anchor)
    elif anchor is not None:
        raise ValueError("an anchor seal is checked only with a trusted key")
    return report


def _refused(body: codec.CheckpointBody, version: int, messages: int) -> str | None:
    """Why every load refuses this checkpoint whatever its chunks hold, if it does.

    ``messages``: how many the context holds at ``version`` by a fresh replay.
    """
    try:
        check_body(body, version)
    except ValueError as exc:
        return f"checkpoint is refused by loads: {exc}"
    if body.message_count != messages:
        # Loads compare the claim with what the chunks hold; the chunks are
        # compared with the replay below.
        return (
            f"checkpoint is refused by loads: it claims {body.message_count} "
            f"messages, the context holds {messages}"
        )
    return None


class _Verifier:
    """The state of one verify run; each ``_check_*`` method is one check."""

    def __init__(self, log: ThreadLog, clock: Callable[[], float]) -> None:
        self.log = log
        self.clock = clock
        self.report = VerifyReport(log.key)
        self.projection = AgentStateProjection(log.label)
        self.state: AgentState = self.projection.initial(log.key)
        self.max_epoch = 0
        self.replay_ok = True
        self.checkpoints: set[int] = set()
        self.retained_from: codec.CheckpointBody | None = None
        self.encoder = ChunkEncoder()
        self.checked_chunks: set[str] = set()
        self.window = BatchWindow()
        self.checkpoint_list: list[int] = []
        self.hashes: dict[int, bytes] = {}
        self.first = 1

    def problem(self, version: int | None, message: str) -> None:
        self.report.problems.append(Finding(version, message))

    def warning(self, version: int | None, message: str) -> None:
        self.report.warnings.append(Finding(version, message))

    async def run(self) -> VerifyReport:
        log = self.log
        # Checkpoints first: one is written only after its record, so a writer
        # appending meanwhile cannot make a listed checkpoint look orphaned.
        self.checkpoints = set(await log.checkpoint_versions())
        versions = await log.versions()
        await self._check_leftovers()
        present = set(versions)
        start = await self._check_retention(versions)
        self.first = start
        versions = [v for v in versions if v >= start]
        await self._check_records(versions, start)
        await self._check_quarantined()
        self._check_orphan_checkpoints(present)
        await self._check_hint()
        await self._check_lease()
        return self.report

    async def check_trust(self, trust: Ed25519PublicKey, anchor: Seal | None) -> None:
        """The history must extend the last valid seal (and ``anchor``)."""
        found = await check_seals(
            self.log, trust, self.hashes, self.report.head, self.first, anchor
        )
        for version, message in found.problems:
            self.problem(version, message)
        for version, message in found.warnings:
            self.warning(version, message)
        self.report.sealed = found.sealed
        self.report.trusted = found.key

    async def _sealed_record(self, parsed: codec.ParsedRecord) -> None:
        """An encrypted record whose key cannot be had: its structure only."""
        if self.report.encryption not in ("erased", "locked"):
            await self._report_keys()
        self.replay_ok = False
        if parsed.body.epoch < self.max_epoch:
            self.problem(
                parsed.body.version,
                f"epoch {parsed.body.epoch} is lower than the earlier epoch "
                f"{self.max_epoch} (protocol violation)",
            )
        self.max_epoch = max(self.max_epoch, parsed.body.epoch)

    async def _report_keys(self) -> None:
        """Why the records' content cannot be checked: erased, or no usable key."""
        # With a key provider configured, an unusable key is a failure to check
        # what was asked for; without one it is the expected structure-only check.
        provider = (
            self.log.cipher is not None and self.log.cipher.keyring.provider is not None
        )
        try:
            keys = await self.log.keys()
        except EncryptionError as exc:
            # A key object that does not decode (torn, damaged): the structure can
            # still be checked, and verify returns a report rather than raise.
            self.report.encryption = "locked"
            (self.problem if provider else self.warning)(
                None, f"content not checked, the records are encrypted: {exc}"
            )
            return
        erased = keys is not None and keys.status == "erased"
        self.report.encryption = "erased" if erased else "locked"
        if keys is not None and erased:
            self.warning(
                None,
                str(ErasedError(keys.owner, keys.erased_at, self.log.label))
                + "; only the structure was checked",
            )
        else:
            why = keys.error if keys is not None else None
            reason = f": {why}" if why is not None else ""
            (self.problem if provider else self.warning)(
                None, f"content not checked, the records are encrypted{reason}"
            )

    async def _check_leftovers(self) -> None:
        for leftover in await self.log.leftovers():
            self.warning(
                None, f"temporary file left by an interrupted write: {leftover}"
            )

    async def _check_quarantined(self) -> None:
        """Report bytes cut from a torn-looking tail and kept aside.

        A problem, unless provably an interrupted write or a record the log now
        holds unchanged (a warning: the file may go).
        """
        for kept in await self.log.quarantined():
            if kept.torn:
                self.warning(
                    None,
                    f"an interrupted write, never acknowledged, was cut from a "
                    f"segment tail and kept in {kept.location} ({kept.detail}); "
                    "it may be deleted",
                )
                continue
            version = None
            if kept.key is not None and kept.key.startswith(self.log.log_dir):
                version = version_of(kept.key)
            what = (
                f"version {version} of {self.log.label}"
                if version is not None
                else (kept.key or "an object")
            )
            message = (
                f"{what} lies in a torn-looking segment tail, {kept.location}, "
                f"that may hold an acknowledged record: {kept.detail}"
                if kept.in_place
                else f"{what} was cut from a segment tail as torn and kept in "
                f"{kept.location}: {kept.detail}"
            )
            if kept.in_place and kept.data is None and version is not None:
                # Read with the flipped bit put back: the log holds it, intact.
                self.problem(
                    version,
                    f"{what} is stored in a damaged frame ({kept.location}): "
                    f"{kept.detail}; the record itself reads back intact",
                )
                continue
            if version is None or kept.data is None:
                self.problem(version, message)
                continue
            message, restored = await self._quarantined_record(kept, version, message)
            (self.warning if restored else self.problem)(version, message)

    async def _quarantined_record(
        self, kept: Quarantined, version: int, message: str
    ) -> tuple[str, bool]:
        """The message about a quarantined record, and whether the log holds it."""
        assert kept.data is not None  # noqa: S101 - checked by the caller
        try:
            parsed = await self.log.parse(kept.data, version, strict=False)
        except CorruptRecordError as exc:
            return f"{message}; the data is no valid record: {exc}", False
        body = parsed.body
        when = datetime.fromtimestamp(body.committed_at, tz=UTC).isoformat()
        message += (
            f"; the data parses as record version {version} committed at {when} "
            f"by {body.writer!r} (epoch {body.epoch})"
        )
        try:
            current = await self.log.read_parsed(version)
        except ObjectNotFoundError:
            return (
                f"{message}; the log has no version {version}: with no writer "
                f"running, restore it as the file {self.log.record_key(version)} "
                "(the record's bytes, see docs/FORMAT.md), then delete the "
                "quarantine file",
                False,
            )
        except CorruptRecordError:
            return f"{message}; the log's version {version} is unreadable", False
        if current.hash == parsed.hash:
            return (
                f"{message}; the log holds this record (restored): the quarantine "
                "file may be deleted",
                True,
            )
        return (
            f"{message}; the log's version {version} is a different record "
            f"(by {current.body.writer!r}, epoch {current.body.epoch}), written "
            "after the cut: the quarantined record was lost from the log",
            False,
        )

    async def _check_retention(self, versions: list[int]) -> int:
        """Where the replay starts: version 1, or the retained checkpoint."""
        try:
            marker = await self.log.read_retention()
        except CorruptRecordError as exc:
            self.problem(None, str(exc))
            return 1
        if marker is None:
            return 1
        # Records before the marker's checkpoint were removed on purpose: start the
        # replay from that checkpoint.
        start = marker.checkpoint
        below = [v for v in versions if v < start]
        if below:
            self.warning(
                below[-1],
                f"{len(below)} record(s) below the retention point {start} remain "
                "(an interrupted retention)",
            )
        self.checkpoints = {c for c in self.checkpoints if c >= start}
        try:
            self.state, self.retained_from = await read_checkpoint(self.log, start)
            self.window = BatchWindow.unpack(start, self.retained_from.batches)
        except EncryptionError:
            self.replay_ok = False  # reported with the first sealed record
        except (
            ValueError,
            CorruptRecordError,
            ObjectNotFoundError,
            msgspec.DecodeError,
            CompressionUnavailableError,
        ) as exc:
            self.problem(
                start, f"the checkpoint retention relies on is unusable: {exc}"
            )
            self.replay_ok = False
        return start

    async def _check_records(self, versions: list[int], start: int) -> None:
        expected = start
        self.checkpoint_list = sorted(self.checkpoints)
        # The first record's predecessor is the genesis, or one that retention
        # removed: the chain is checked from the second record on.
        async for batch in self.log.audit(versions, after=start - 1, prev_hash=None):
            for item in batch:
                if isinstance(item, ScanProblem):
                    self._record_problem(item)
                    expected = max(expected, item.version + 1)
                    continue
                expected = item.body.version + 1
                await self._check_record(item)
        self.report.head = expected - 1

    def _record_problem(self, item: ScanProblem) -> None:
        if item.size:
            # A record that was read but failed its checks still counts as read.
            self.report.records += 1
            self.report.bytes += item.size
        self.problem(item.version, item.message)
        if item.kind != "chain":
            # The record itself is unusable: the state can no longer be rebuilt.
            self.replay_ok = False

    async def _check_record(self, parsed: codec.ParsedRecord) -> None:
        version = parsed.body.version
        self.report.records += 1
        self.report.bytes += parsed.size
        self.hashes[version] = parsed.hash
        if parsed.sealed:
            await self._sealed_record(parsed)
            return
        if parsed.encrypted and self.report.encryption == "off":
            self.report.encryption = "on"
        if version > self.window.head:  # not the retained checkpoint's own record
            self._extend_window(parsed)
        try:
            record = await self.log.materialize_one(parsed)
        except (CorruptRecordError, EncryptionError) as exc:
            self.problem(version, str(exc))
            self.replay_ok = False
            return
        retained = self.retained_from
        if retained is not None and version == retained.version:
            # The first retained record: its predecessor is gone on purpose; the
            # checkpoint vouches for it instead.
            if parsed.hash != retained.record_hash:
                self.problem(
                    version,
                    "record does not match the checkpoint retention relies on",
                )
            self.max_epoch = record.epoch
            return
        self._check_epoch(record)
        self._check_unknown_events(record)
        self._replay(record)
        if self.replay_ok and version in self.checkpoints:
            await self._check_checkpoint(parsed)

    def _extend_window(self, parsed: codec.ParsedRecord) -> None:
        version = parsed.body.version
        # Digesting the events costs a re-encoding: only for the records a
        # checkpoint's window covers (every entry a comparison looks at is one).
        at = bisect.bisect_left(self.checkpoint_list, version)
        covered = (
            at < len(self.checkpoint_list)
            and self.checkpoint_list[at] - version < IDEMPOTENCY_WINDOW
        )
        digest = parsed.content_digest() if covered else bytes(DIGEST_SIZE)
        self.window.add(version, parsed.body.batch_id, digest)

    def _check_epoch(self, record: codec.Record) -> None:
        if record.epoch < self.max_epoch:
            self.problem(
                record.version,
                f"epoch {record.epoch} is lower than the earlier epoch "
                f"{self.max_epoch} (protocol violation)",
            )
        self.max_epoch = max(self.max_epoch, record.epoch)

    def _check_unknown_events(self, record: codec.Record) -> None:
        for event in record.events:
            if isinstance(event, ev.UnknownEvent):
                kind = "required" if event.required else "optional"
                (self.problem if event.required else self.warning)(
                    record.version,
                    f"unknown {kind} event type {event.type!r} (schema {event.schema})",
                )

    def _replay(self, record: codec.Record) -> None:
        if not self.replay_ok:
            return
        try:
            state = self.state
            for event in record.events:
                state = self.projection.apply(state, record, event)
            state.version = record.version
            self.state = state
        except (UnknownEventError, ValueError) as exc:
            self.replay_ok = False
            self.warning(record.version, f"replay stopped: {exc}")

    async def _check_checkpoint(self, parsed: codec.ParsedRecord) -> None:
        record_hash = parsed.hash
        state = self.state
        version = state.version
        self.report.checkpoints += 1
        try:
            data, encrypted = await self.log.open_checkpoint(version)
            body = codec.decode_checkpoint(data)
        except (ValueError, ObjectNotFoundError, EncryptionError) as exc:
            if await self._torn_checkpoint(version):
                # Derived data written without a sync: a power cut can leave it
                # torn. Loads skip it; the log still holds everything it covered.
                self.warning(version, f"{_UNSYNCED} is torn ({exc}); {_SKIPPED}")
            else:
                self.problem(version, f"checkpoint is unreadable: {exc}")
            return
        if parsed.encrypted and not encrypted and self.log.keyed:
            # Writers encrypt every checkpoint of an encrypted record: this one
            # was made without the keys (loads refuse it).
            self.problem(
                version,
                "checkpoint is not encrypted but its record is: written without "
                f"the thread's keys; {_SKIPPED}",
            )
            return
        refs: list[str] | None = None
        try:
            refs, _ = await expand_refs(self.log, body.chunks, body.message_count)
        except ObjectNotFoundError as exc:
            # Index blobs are derived data, written unsynced like the chunks.
            self.warning(
                version, f"{_UNSYNCED} lacks a chunk index ({exc.key}); {_SKIPPED}"
            )
        except (
            ValueError,
            CorruptRecordError,
            EncryptionError,
            CompressionUnavailableError,
        ) as exc:
            self.problem(version, f"checkpoint's chunk index is unusable: {exc}")
        refused = _refused(body, version, len(state.context))
        if refused is not None:
            self.problem(version, refused)
        elif body.record_hash != record_hash:
            self.problem(
                version, "checkpoint names a record hash that is not the log's"
            )
        elif refs is None:
            return  # its chunk list cannot be had: reported above
        elif body.state != encode_state(state.without_context()) or [
            ref_digest(ref) for ref in refs
        ] != [digest for digest, _ in self.encoder.chunk(state.context)]:
            self.problem(version, "checkpoint differs from a fresh replay")
        elif not self.window.pack().endswith(body.batches):
            # A suffix: a checkpoint built on one older than the window field
            # knows only the records after that one.
            self.problem(
                version, "checkpoint's batch window differs from the log's batch ids"
            )
        if refs is not None:
            await self._check_chunks(version, refs)

    async def _torn_checkpoint(self, version: int) -> bool:
        """Whether the checkpoint's stored bytes look cut short by a power cut.

        Empty, shorter than its frame says, or holding a whole 512-byte sector of
        zeros (unwritten blocks read as zeros): what an unsynced write leaves.
        A flipped bit in a complete file is corruption, not this.
        """
        try:
            raw, _ = await self.log.store.read(self.log.checkpoint_key(version))
        except ObjectNotFoundError:
            return True
        if len(raw) < _FRAME_HEAD.size:
            return True
        # A plain checkpoint's frame names its length; an encrypted container
        # names none in the clear, so only its zeros can tell.
        if raw[:4] == codec.CHECKPOINT_MAGIC:
            length = _FRAME_HEAD.unpack_from(raw)[1]
            if len(raw) < _FRAME_HEAD.size + length + 4:
                return True
        zero = bytes(512)
        return any(raw[i : i + 512] == zero for i in range(0, len(raw) - 511, 512))

    async def _check_chunks(self, version: int, refs: list[str]) -> None:
        # Each chunk is shared by many checkpoints: check its bytes once.
        unchecked = [d for d in dict.fromkeys(refs) if d not in self.checked_chunks]
        spans: list[tuple[str, LogSpan]] = []
        for ref in unchecked:
            try:
                span = LogSpan.parse(ref)
            except ValueError as exc:
                self.problem(version, f"checkpoint chunk reference: {exc}")
                continue
            if span is not None:
                spans.append((ref, span))
        if spans:
            await self._check_spans(version, spans)
        unchecked = [d for d in unchecked if not d.startswith("@")]
        if not unchecked:
            return
        raw = await self.log.read_blobs_raw(unchecked)
        for digest, blob in zip(unchecked, raw, strict=True):
            if blob is None:
                self.warning(
                    version, f"{_UNSYNCED} lacks chunk {digest} (missing); {_SKIPPED}"
                )
                continue
            try:
                checked = await self.log.check_blob(blob, digest, limit=MAX_CHUNK_READ)
            except (
                EncryptionError,
                CompressionUnavailableError,
                CorruptRecordError,
            ) as exc:
                self.problem(version, f"checkpoint chunk {digest}: {exc}")
                continue
            if checked is None:
                self.problem(version, f"checkpoint chunk {digest} is corrupt")
            else:
                self.checked_chunks.add(digest)

    async def _check_spans(
        self, version: int, spans: list[tuple[str, LogSpan]]
    ) -> None:
        """Check that each log span names messages the log holds, as its digest says."""
        for ref, span in spans:
            if span.last > version:
                self.problem(
                    version, f"checkpoint log span {ref} reaches past its version"
                )
                continue
            try:
                added = await read_spans(self.log, [span])
                messages = span_messages(self.log, span, added)
            except CorruptRecordError as exc:
                self.problem(
                    version,
                    f"checkpoint log span {span.first}-{span.last} cannot be read: "
                    f"{exc}; {_SKIPPED}",
                )
                continue
            if pack_chunk(messages)[0] != span.digest:
                self.problem(
                    version,
                    f"checkpoint log span {span.first}-{span.last} does not hold "
                    "the chunk its digest names",
                )
            else:
                self.checked_chunks.add(ref)

    def _check_orphan_checkpoints(self, present: set[int]) -> None:
        for version in sorted(self.checkpoints - present):
            self.problem(version, "checkpoint covers a version that is not in the log")

    async def _check_hint(self) -> None:
        hint = await self.log.read_hint()
        if hint and hint not in self.checkpoints:
            self.warning(hint, "LAST_CHECKPOINT points at a missing checkpoint")

    async def _check_lease(self) -> None:
        """A damaged or implausible ``LEASE``: warnings, since it is survivable.

        Such a lease proves no live holder (the next writer takes over at once and
        fences above every epoch in the log), so no record is at risk; the warning
        says what was wrong, for the operator.
        """
        found = await self.log.inspect_lease()
        lease = found.record
        if lease is None:
            return
        if found.damage is not None:
            self.warning(
                None,
                f"LEASE is damaged, {found.damage}: it proves no live holder; the "
                "next writer replaces it at an epoch above every epoch in the log",
            )
            return
        now = self.clock()
        doubt = untrusted_expiry(lease, now)
        if doubt is not None:
            self.warning(
                None,
                f"LEASE of {lease.holder!r} at epoch {lease.epoch} is not believed: "
                f"{doubt}; another holder may take over",
            )
        elif lease.expires_at - now > LEGACY_MAX_TTL + MAX_CLOCK_SKEW:
            days = (lease.expires_at - now) / 86400
            self.warning(
                None,
                f"LEASE of {lease.holder!r} at epoch {lease.epoch} expires in "
                f"{days:.1f} days (ttl {lease.ttl:g} s): no other holder can take "
                "over until then",
            )
        if lease.epoch < self.max_epoch:
            self.warning(
                None,
                f"LEASE epoch {lease.epoch} is below epoch {self.max_epoch} in the "
                "log (LEASE was lost or rewritten); the next writer still fences "
                "above the log",
            )
