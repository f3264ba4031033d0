"""Writer leases and epoch fencing.

Why a writer with a stale epoch cannot append after a takeover: the new writer first
compare-and-swaps ``LEASE`` to epoch ``e + 1``, then commits a ``LeaseAcquired`` record
at the next free version by exclusive create. Every commit is an exclusive create of
``log/<head + 1>.rec``; the old writer's next create therefore lands on a slot that is
already taken (by the fence or by a record after it), it reads that slot, sees an
epoch above its own, and raises ``FencedError``. A slot it won *before* the fence
landed is a valid commit that the new writer reads and applies. Expiry only decides
when a takeover may start; correctness never depends on clocks.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import msgspec

from journal.errors import (
    LeaseHeldError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from journal.store import ObjectStore

__all__ = ["LeaseRecord", "LeaseState", "acquire_lease", "read_lease", "write_lease"]

_decoder = msgspec.json.Decoder()


class LeaseRecord(msgspec.Struct, frozen=True):
    """The content of a thread's ``LEASE`` object (JSON, for operators).

    Attributes:
        holder: The holder id of the writer.
        epoch: The fencing epoch; strictly increases with every acquisition.
        expires_at: Wall-clock seconds after which another holder may take over.
        acquired_at: When this epoch was acquired.
    """

    holder: str
    epoch: int
    expires_at: float
    acquired_at: float


_lease_decoder = msgspec.json.Decoder(LeaseRecord)


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


async def read_lease(store: ObjectStore, key: str) -> tuple[LeaseRecord | None, str]:
    """Read ``LEASE``; ``(None, "")`` when the thread has none."""
    try:
        data, etag = await store.read(key)
    except ObjectNotFoundError:
        return None, ""
    try:
        return _lease_decoder.decode(data), etag
    except msgspec.DecodeError:
        # An unreadable lease cannot prove a live holder; it is replaced by CAS.
        return LeaseRecord("", 0, 0.0, 0.0), etag


async def write_lease(
    store: ObjectStore, key: str, record: LeaseRecord, etag: str | None
) -> str:
    """CAS the lease: create when ``etag`` is None, else replace if it still matches."""
    data = msgspec.json.encode(record)
    if etag is None:
        return await store.create(key, data)
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
) -> LeaseState:
    """Take the lease at the next epoch, or raise ``LeaseHeldError``.

    The same holder may take over its own unexpired lease (a restarted process).

    Args:
        store: The thread's store.
        key: The ``LEASE`` object's key.
        label: The thread's readable name, for errors.
        holder: Our holder id.
        ttl: Lease duration in seconds.
        wait: How long to wait for another holder's lease to expire.
        clock: Wall clock (seconds).

    Raises:
        LeaseHeldError: Another holder's lease is live and did not expire in ``wait``.
    """
    deadline = time.monotonic() + wait
    delay = 0.01
    while True:
        current, etag = await read_lease(store, key)
        taken_at = time.monotonic()
        now = clock()
        if (
            current is not None
            and current.holder != holder
            and current.expires_at > now
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseHeldError(
                    label, current.holder, current.epoch, current.expires_at
                )
            await asyncio.sleep(min(delay, remaining, current.expires_at - now + 0.001))
            delay = min(delay * 2, 0.5)
            continue
        epoch = (current.epoch if current is not None else 0) + 1
        record = LeaseRecord(holder, epoch, now + ttl, now)
        try:
            new_etag = await write_lease(
                store, key, record, etag if current is not None else None
            )
        except (ObjectExistsError, PreconditionFailedError, ObjectNotFoundError):
            continue  # someone else moved the lease: look again
        return LeaseState(record, new_etag, taken_at)
