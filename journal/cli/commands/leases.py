"""Reading a thread's lease without taking it, and waiting for it to expire."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from journal.cli.reports import LeaseView
from journal.engine.lease import inspect_lease, untrusted_expiry
from journal.layout import ThreadLayout

if TYPE_CHECKING:
    from journal.cli.progress import Progress
    from journal.engine import Journal
    from journal.keys import ThreadKey

__all__ = ["read_lease_view", "wait_for_lease"]


async def read_lease_view(journal: Journal, key: ThreadKey) -> LeaseView | None:
    """The lease of ``key`` as it stands (None when the thread has none)."""
    found = await inspect_lease(journal.store, ThreadLayout.of(key).lease_key)
    record = found.record
    if record is None:
        return None
    now = journal.clock()
    live = (
        found.damage is None
        and bool(record.holder)
        and record.expires_at > now
        and untrusted_expiry(record, now) is None
    )
    idle = live and record.idle
    return LeaseView(
        record.holder,
        record.epoch,
        record.expires_at,
        live and not idle,
        found.damage,
        idle,
    )


async def wait_for_lease(
    journal: Journal,
    key: ThreadKey,
    wait: float,
    progress: Progress,
) -> LeaseView | None:
    """Wait up to ``wait`` seconds for a live lease on ``key`` to go, showing progress.

    Returns:
        The lease as last read: no longer live, or still live when ``wait``
        ran out (the caller's acquire then reports the holder).
    """
    lease = await read_lease_view(journal, key)
    if lease is None or not lease.live or wait <= 0:
        return lease
    deadline = time.monotonic() + wait
    progress.begin(
        f"waiting for the lease of {lease.holder!r} (epoch {lease.epoch}), "
        f"seconds of {wait:g}:",
        max(int(wait), 2),
    )
    try:
        import asyncio  # waiting needs the loop; a one-shot read runs without one

        while lease is not None and lease.live and time.monotonic() < deadline:
            await asyncio.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))
            progress.step()
            lease = await read_lease_view(journal, key)
    finally:
        progress.end()
    return lease
