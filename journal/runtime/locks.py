"""Per-thread locks: one operation at a time on a thread, within one agent."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from journal.keys import ThreadKey

__all__ = ["ThreadLocks"]


@dataclass(slots=True)
class _ThreadLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class ThreadLocks:
    """An asyncio lock per thread key, kept only while someone holds or awaits it."""

    def __init__(self) -> None:
        self._locks: dict[ThreadKey, _ThreadLock] = {}

    def busy(self, key: ThreadKey) -> bool:
        """Whether an operation on ``key`` holds or awaits its lock."""
        return key in self._locks

    @contextlib.asynccontextmanager
    async def hold(self, key: ThreadKey) -> AsyncIterator[None]:
        """Hold the lock of ``key`` for the ``async with`` block."""
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = _ThreadLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[key]
