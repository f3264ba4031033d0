"""Stores that fail on purpose, for the writer's tests."""

from __future__ import annotations

from journal.errors import StorageError
from stores.memory import MemoryStore


class LostReply(MemoryStore):
    """Applies a create, then reports a failure for the key it is told to."""

    fail_key: str | None = None

    async def create(self, key: str, data: bytes) -> str:
        etag = await super().create(key, data)
        if key == self.fail_key:
            self.fail_key = None
            raise StorageError("connection reset after the write was applied")
        return etag
