"""In-process object store (``memory://name``): for tests, demos and benchmarks.

Stores opened with the same name in one process share their objects, like fsspec's
memory file system; everything is lost when the process exits.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from bisect import bisect_right
from typing import TYPE_CHECKING, ClassVar

from journal.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
)
from journal.store import ObjectStore

if TYPE_CHECKING:
    import builtins
    from collections.abc import Sequence

__all__ = ["MemoryStore"]


class MemoryStore(ObjectStore):
    """A thread-safe dict of objects with exclusive create and etag CAS."""

    _named: ClassVar[dict[str, MemoryStore]] = {}
    _named_lock: ClassVar[threading.Lock] = threading.Lock()
    _counter = itertools.count(1)

    def __init__(self, name: str = "") -> None:
        self.url = f"memory://{name}"
        self._objects: dict[str, tuple[bytes, str]] = {}
        self._sorted: list[str] = []
        self._lock = threading.Lock()

    @classmethod
    def named(cls, name: str) -> MemoryStore:
        """The process-wide store called ``name`` (created on first use)."""
        with cls._named_lock:
            store = cls._named.get(name)
            if store is None:
                store = cls._named[name] = cls(name)
            return store

    @staticmethod
    def _etag(data: bytes) -> str:
        digest = hashlib.blake2b(data, digest_size=8).hexdigest()
        return f"{next(MemoryStore._counter)}-{digest}"

    def _put(self, key: str, data: bytes) -> str:
        if key not in self._objects:
            self._sorted.insert(bisect_right(self._sorted, key), key)
        etag = self._etag(data)
        self._objects[key] = (bytes(data), etag)
        return etag

    async def create(self, key: str, data: bytes) -> str:
        with self._lock:
            if key in self._objects:
                raise ObjectExistsError(key)
            return self._put(key, data)

    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        with self._lock:
            if if_match is not None:
                current = self._objects.get(key)
                if current is None:
                    raise ObjectNotFoundError(key)
                if current[1] != if_match:
                    raise PreconditionFailedError(key)
            return self._put(key, data)

    async def read(self, key: str) -> tuple[bytes, str]:
        with self._lock:
            found = self._objects.get(key)
        if found is None:
            raise ObjectNotFoundError(key)
        return found

    async def read_many(
        self, keys: Sequence[str], *, concurrency: int = 16
    ) -> builtins.list[bytes | None]:
        with self._lock:
            return [
                found[0] if (found := self._objects.get(k)) is not None else None
                for k in keys
            ]

    async def exist_many(self, keys: Sequence[str]) -> builtins.list[bool]:
        with self._lock:
            return [k in self._objects for k in keys]

    async def list(
        self, prefix: str, *, start_after: str | None = None
    ) -> builtins.list[str]:
        prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        with self._lock:
            lo = bisect_right(self._sorted, start_after) if start_after else 0
            if prefix and (start_after is None or start_after < prefix):
                lo = max(lo, bisect_right(self._sorted, prefix[:-1]))
            out = []
            for key in itertools.islice(self._sorted, lo, None):
                if not key.startswith(prefix):
                    if key > prefix:
                        break
                    continue
                out.append(key)
            return out

    async def delete(self, key: str) -> bool:
        with self._lock:
            if self._objects.pop(key, None) is None:
                return False
            self._sorted.remove(key)
            return True

    async def children(self, prefix: str) -> builtins.list[str]:
        prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        names: set[str] = set()
        for key in await self.list(prefix):
            rest = key[len(prefix) :]
            if "/" in rest:
                names.add(rest.split("/", 1)[0])
        return sorted(names)
