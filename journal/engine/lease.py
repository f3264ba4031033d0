"""Writer leases and epoch fencing.

Why a writer with a stale epoch cannot append after a takeover: the new writer first
compare-and-swaps ``LEASE`` to epoch ``e + 1``, then commits a ``LeaseAcquired`` record
at the next free version by exclusive create. Every commit is an exclusive create of
``log/<head + 1>.rec``; the old writer's next create therefore lands on a slot that is
already taken (by the fence or by a record after it), it reads that slot, sees an
epoch above its own, and raises ``FencedError``. A slot it won *before* the fence
landed is a valid commit that the new writer reads and applies. Expiry only decides
when a takeover may start; correctness never depends on clocks.

A ``LEASE`` proves a live holder only if it can be believed: it carries a SHA-256 of
its fields (``LEASE`` objects written before the checksum existed are read unchecked),
and its ``expires_at`` may lie at most its recorded ``ttl`` plus
:data:`MAX_CLOCK_SKEW` ahead of the reader's clock (:data:`LEGACY_MAX_TTL` stands in
for the ttl of a lease that records none). A lease that fails either test is read as
expired, so one damaged digit cannot lock a thread; the epoch it names, if readable,
stays a floor, and the writer's fence outranks every epoch in the log in any case.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

import msgspec

from journal.errors import (
    LeaseHeldError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
)
from journal.lazy import lazy_logger

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from journal.store import ObjectStore

__all__ = [
    "LEGACY_MAX_TTL",
    "MAX_CLOCK_SKEW",
    "RELEASED_EXPIRY",
    "LeaseRead",
    "LeaseRecord",
    "LeaseState",
    "acquire_lease",
    "decode_lease",
    "encode_lease",
    "inspect_lease",
    "lease_checksum",
    "lease_size",
    "read_lease",
    "untrusted_expiry",
    "write_lease",
]

logger = lazy_logger("journal")

MAX_CLOCK_SKEW = 3600.0
"""Seconds a writer's clock may run ahead of a reader's before its lease's expiry,
further ahead than its ttl allows, is no longer believed."""

RELEASED_EXPIRY = 0.0
"""The ``expires_at`` of a released lease: past by any clock, so that any holder
takes it at once, however far behind the releaser's clock its own runs."""

LEGACY_MAX_TTL = 86400.0
"""The longest ttl believed of a ``LEASE`` that records none (one day)."""

_MAX_EPOCH = 2**53
"""Epochs above this in a damaged lease are not kept as a floor (records hold u64)."""


class LeaseRecord(msgspec.Struct, frozen=True):
    """The content of a thread's ``LEASE`` object (JSON, for operators).

    Attributes:
        holder: The holder id of the writer ("" for a lease that proves nothing).
        epoch: The fencing epoch; strictly increases with every acquisition.
        expires_at: Wall-clock seconds after which another holder may take over;
            :data:`RELEASED_EXPIRY` once its holder released it.
        acquired_at: When this epoch was acquired (renewals keep it).
        ttl: The lease duration the holder renews it for; 0.0 when not recorded
            (a ``LEASE`` written before the field existed).
        idle: The holder keeps the lease between operations and runs none now:
            another holder may take it at once (the next epoch fences the idle
            holder, whose next operation then starts over from the log).
    """

    holder: str
    epoch: int
    expires_at: float
    acquired_at: float
    ttl: float = 0.0
    idle: bool = False


class _LeaseObject(msgspec.Struct, omit_defaults=True):
    """``LEASE`` as stored: the record's fields and the checksum over them."""

    holder: str
    epoch: int
    expires_at: float
    acquired_at: float
    ttl: float | None = None
    idle: bool = False
    sha256: str | None = None


_object_decoder = msgspec.json.Decoder(_LeaseObject)


class LeaseRead(msgspec.Struct, frozen=True):
    """What reading ``LEASE`` found.

    Attributes:
        record: The lease; None when the thread has none. For a damaged lease, a
            placeholder that proves no holder: holder "", expired, and the epoch
            the object still names when that is readable (a floor), else 0.
        etag: The object's etag, for a compare-and-swap ("" when there is none).
        damage: Why the object cannot be believed (unreadable, or its checksum
            does not match); None when it can.
        checked: Whether it carried a checksum that matched (False for a lease
            written before the checksum existed, which is read unchecked).
    """

    record: LeaseRecord | None
    etag: str
    damage: str | None = None
    checked: bool = False


class LeaseState(msgspec.Struct):
    """A held lease: the record last written, its etag, and when it was taken.

    Attributes:
        record: The lease as written.
        etag: Its etag, for the next compare-and-swap.
        taken_at: ``time.monotonic()`` read just before the expiry was computed: the
            lease is valid for its TTL from then on, however long acquiring waited.
    """

    record: LeaseRecord
    etag: str
    taken_at: float = 0.0


def lease_checksum(record: LeaseRecord) -> str:
    """SHA-256 hex of the canonical encoding of a lease's fields.

    The canonical encoding is the compact JSON array ``[holder, epoch, expires_at,
    acquired_at, ttl]`` with the three times as floats in shortest round-trip form,
    so the checksum depends on the values only, not on how the JSON is spaced. An
    idle lease appends ``true``: a reader that predates the flag then finds the
    checksum wrong and reads the lease as proving no live holder, which is what an
    idle lease means.
    """
    fields: list[object] = [
        record.holder,
        record.epoch,
        float(record.expires_at),
        float(record.acquired_at),
        float(record.ttl),
    ]
    if record.idle:
        fields.append(True)
    return hashlib.sha256(msgspec.json.encode(fields)).hexdigest()


def encode_lease(record: LeaseRecord) -> bytes:
    """The ``LEASE`` bytes of ``record``, with its ttl and checksum.

    Padded with spaces after the JSON object to a size that depends on the holder
    alone (:func:`lease_size`), so that a holder's renewals, idle marks and release
    rewrite ``LEASE`` at its own size: the local store then overwrites it in place
    (see :meth:`stores.local.LocalStore.replace_unsynced`).
    """
    data = msgspec.json.encode(
        _LeaseObject(
            record.holder,
            record.epoch,
            record.expires_at,
            record.acquired_at,
            record.ttl,
            record.idle,
            lease_checksum(record),
        )
    )
    size = lease_size(record.holder)
    return data + b" " * (size - len(data)) if len(data) < size else data


_LEASE_FRAME = len(
    msgspec.json.encode(_LeaseObject("", 0, 0.0, 0.0, 0.0, idle=True, sha256="0" * 64))
) - (len(b'""') + len(b"0") + 3 * len(b"0.0"))
"""The bytes of an encoded lease besides its holder and its numbers (idle set)."""
_LONGEST_INT = len(str(_MAX_EPOCH))
_LONGEST_FLOAT = 24  # e.g. -1.2345678901234567e-308, msgspec's longest float


def lease_size(holder: str) -> int:
    """The size every lease of ``holder`` is padded to (see :func:`encode_lease`).

    The longest such a lease can encode to: its holder, an epoch up to
    :data:`_MAX_EPOCH`, three floats of any value and the idle flag set. An epoch
    beyond that (which no acquisition reaches) only makes that lease longer.
    """
    return (
        _LEASE_FRAME
        + len(msgspec.json.encode(holder))
        + _LONGEST_INT
        + 3 * _LONGEST_FLOAT
    )


def _epoch_floor(data: bytes) -> int:
    """The epoch a damaged ``LEASE`` still names, if any: a floor for the next."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return 0
    epoch = raw.get("epoch") if isinstance(raw, dict) else None
    if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0:
        return epoch if epoch <= _MAX_EPOCH else 0
    return 0


def decode_lease(data: bytes) -> tuple[LeaseRecord, str | None, bool]:
    """Decode ``LEASE`` bytes: ``(record, damage, checked)``, see :class:`LeaseRead`."""
    try:
        obj = _object_decoder.decode(data)
    except msgspec.DecodeError as exc:
        return _placeholder(_epoch_floor(data)), f"unreadable ({exc})", False
    record = LeaseRecord(
        obj.holder, obj.epoch, obj.expires_at, obj.acquired_at, obj.ttl or 0.0, obj.idle
    )
    if obj.sha256 is None:
        return record, None, False
    if obj.sha256 != lease_checksum(record):
        return (
            _placeholder(obj.epoch if 0 <= obj.epoch <= _MAX_EPOCH else 0),
            "checksum mismatch: its sha256 does not match its fields (holder "
            f"{obj.holder!r}, epoch {obj.epoch}, expires_at {obj.expires_at!r})",
            False,
        )
    return record, None, True


def _placeholder(epoch: int) -> LeaseRecord:
    return LeaseRecord("", epoch, 0.0, 0.0)


def untrusted_expiry(record: LeaseRecord, now: float) -> str | None:
    """Why ``record.expires_at`` cannot be believed at ``now``; None if it can.

    A holder writes ``expires_at = its clock + ttl``, so a lease ahead of the reader
    by more than its ttl plus :data:`MAX_CLOCK_SKEW` was not written that way (a
    damaged digit in a lease without a checksum, or a clock far off): it is treated
    as expired, instead of locking the thread until then.
    """
    ttl = record.ttl if record.ttl > 0 else LEGACY_MAX_TTL
    ahead = record.expires_at - now
    if ahead > ttl + MAX_CLOCK_SKEW:
        what = "its ttl" if record.ttl > 0 else "the longest legacy ttl believed"
        return (
            f"expires_at {record.expires_at!r} is {ahead:.0f} s ahead of now, more "
            f"than {what} ({ttl:g} s) plus {MAX_CLOCK_SKEW:g} s of clock skew"
        )
    return None


async def inspect_lease(store: ObjectStore, key: str) -> LeaseRead:
    """Read ``LEASE`` and say whether it can be believed (see :class:`LeaseRead`)."""
    try:
        data, etag = await store.read(key)
    except ObjectNotFoundError:
        return LeaseRead(None, "")
    record, damage, checked = decode_lease(data)
    if damage is not None:
        # A holder overwrites its own lease in place (the local store), and a read
        # that races the write can copy it half old, half new. A second read finds
        # the write finished; one that finds the same bytes again is real damage.
        try:
            again, etag_again = await store.read(key)
        except ObjectNotFoundError:
            return LeaseRead(None, "")
        if again != data:
            etag = etag_again
            record, damage, checked = decode_lease(again)
    return LeaseRead(record, etag, damage, checked)


async def read_lease(store: ObjectStore, key: str) -> tuple[LeaseRecord | None, str]:
    """Read ``LEASE``; ``(None, "")`` when the thread has none.

    A damaged lease (unreadable, or its checksum fails) cannot prove a live holder:
    it reads as an expired lease of holder "" at the epoch it still names (or 0),
    and is replaced by CAS.
    """
    found = await inspect_lease(store, key)
    return found.record, found.etag


async def write_lease(
    store: ObjectStore,
    key: str,
    record: LeaseRecord,
    etag: str | None,
    *,
    durable: bool = True,
) -> str:
    """CAS the lease: create when ``etag`` is None, else replace if it still matches.

    ``durable=False`` is for a holder moving its own lease at its own epoch (a
    renewal, an idle mark, a release): a power cut that loses the write leaves the
    lease as it was before it, at the same epoch, or unreadable, which is read as
    expired; the epoch is never in doubt, since the fence record in the log is what
    outranks an older writer.
    """
    data = encode_lease(record)
    if etag is None:
        return await store.create(key, data)
    if not durable:
        return await store.replace_unsynced(key, data, if_match=etag)
    return await store.replace(key, data, if_match=etag)


async def acquire_lease(
    store: ObjectStore,
    key: str,
    *,
    label: str,
    holder: str,
    ttl: float,
    wait: float,
    clock: Callable[[], float] = time.time,
    before_create: Callable[[], Awaitable[None]] | None = None,
) -> LeaseState:
    """Take the lease at the next epoch, or raise ``LeaseHeldError``.

    The same holder may take over its own unexpired lease (a restarted process), and
    anyone may take a lease its holder marked idle.

    Args:
        store: The thread's store.
        key: The ``LEASE`` object's key.
        label: The thread's readable name, for errors.
        holder: Our holder id.
        ttl: Lease duration in seconds.
        wait: How long to wait for another holder's lease to expire.
        clock: Wall clock (seconds).
        before_create: Awaited before ``LEASE`` is created (a thread's first
            object): the thread index's entry is written then.

    Raises:
        LeaseHeldError: Another holder's lease is live and did not expire in ``wait``.
    """
    deadline = time.monotonic() + wait
    delay = 0.01
    while True:
        found = await inspect_lease(store, key)
        current, etag = found.record, found.etag
        taken_at = time.monotonic()
        now = clock()
        doubt = found.damage
        if doubt is None and current is not None:
            doubt = untrusted_expiry(current, now)
        if doubt is not None:
            logger.warning("%s: LEASE proves no live holder: %s", label, doubt)
        elif (
            current is not None
            and current.holder != holder
            and current.expires_at > now
            and not current.idle
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseHeldError(
                    label, current.holder, current.epoch, current.expires_at
                )
            import asyncio  # only a writer waiting for a lease needs it

            await asyncio.sleep(min(delay, remaining, current.expires_at - now + 0.001))
            delay = min(delay * 2, 0.5)
            continue
        epoch = (current.epoch if current is not None else 0) + 1
        record = LeaseRecord(holder, epoch, now + ttl, now, ttl)
        if current is None and before_create is not None:
            await before_create()
        try:
            new_etag = await write_lease(
                store, key, record, etag if current is not None else None
            )
        except (ObjectExistsError, PreconditionFailedError, ObjectNotFoundError):
            continue  # someone else moved the lease: look again
        return LeaseState(record, new_etag, taken_at)
