"""Virtual time for the simulator: an event loop whose clock jumps instead of waiting.

The loop never blocks: when nothing is ready it advances the virtual clock to the
next timer and carries on. A simulated minute of lease renewals, backoffs and
injected delays runs in milliseconds, and always in the same order for the same
seed. The engine's two direct reads of ``time.monotonic`` (writer validity and lease
waits) are pointed at the same clock by :func:`virtual_engine_time`.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["SimulationDeadlock", "VirtualClock", "VirtualLoop", "virtual_engine_time"]

WALL_START = 1_700_000_000.0
"""The virtual wall clock at virtual time 0 (lease expiry and ``committed_at``)."""


class SimulationDeadlock(RuntimeError):
    """Every task waits and no timer is pending: nothing can ever run again."""


class VirtualClock:
    """Seconds since the start of the run; advanced only by the loop."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        """The virtual monotonic clock."""
        return self.now

    def wall(self) -> float:
        """The virtual wall clock."""
        return WALL_START + self.now


class _JumpingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Polls without blocking; a wait for a timer advances the clock instead."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready: list[Any] = super().select(0)
        if ready:
            return ready
        if timeout is None:
            raise SimulationDeadlock("every task is waiting and no timer is pending")
        if timeout > 0:
            self._clock.now += timeout
        return ready


class VirtualLoop(asyncio.SelectorEventLoop):
    """A selector loop on a :class:`VirtualClock`."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        super().__init__(_JumpingSelector(clock))

    def time(self) -> float:
        return self.clock.now


@contextlib.contextmanager
def virtual_engine_time(
    clock: VirtualClock, urandom: Callable[[int], bytes]
) -> Iterator[None]:
    """Point the engine's ``time.monotonic`` and batch-id randomness at the run.

    The writer and the lease module read ``time.monotonic()`` for a lease's validity
    and for how long to wait; the writer draws unnamed batch ids from
    ``os.urandom``. Both modules get a stand-in for the duration, so that a seed
    replays exactly.
    """
    from journal.engine import lease, writer

    fake_time = types.SimpleNamespace(monotonic=clock.monotonic, time=clock.wall)
    fake_os = types.SimpleNamespace(urandom=urandom)
    saved = (writer.time, lease.time, writer.os)
    writer.time, lease.time = fake_time, fake_time  # type: ignore[assignment]
    writer.os = fake_os  # type: ignore[assignment]
    try:
        yield
    finally:
        writer.time, lease.time, writer.os = saved
