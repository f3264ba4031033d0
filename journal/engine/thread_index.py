"""The thread index: one small object per thread, so that listing reads one prefix.

Listing by walking the store's directories costs a directory read per session and a
check per thread (about 1,100 directory reads and 1,000 stats for 1,000 threads on
a local disk; on S3 a LIST request per directory). The index is one prefix,
``~threads/``, holding an entry per thread: listing is one ``list`` of it.

* **Entries.** Before a writer creates a thread's ``LEASE`` (the first object a
  thread has), it creates the thread's entry, durably: every thread holding a
  ``LEASE`` has an entry, whatever crash came after. An entry's name is the
  thread's path with ``.`` between its segments, plus ``.t`` (segments never hold a
  ``.``); a path too long for one name is ``~<sha-256 of the path>.t`` holding the
  path. Entries are never deleted: one without a thread (a crash before the
  ``LEASE``, an erased thread) is skipped when listing, which checks every entry's
  ``LEASE``.
* **Completeness.** Threads created before the index existed have no entry, so
  listing trusts it only when ``~threads/COMPLETE`` exists. A writer that finds
  neither that marker nor any namespace in the store (a new store) writes the
  marker first: every thread the store will hold is then created by a writer that
  registers it. A store that held threads before keeps listing by the walk until
  :meth:`ThreadIndex.build` (``Journal.index_threads``) has registered them and
  written the marker.
* **What the index cannot see.** A thread whose directory is copied into the
  store by hand (a restore from a backup) has no entry; ``Journal.index_threads``
  registers it. Writers of versions without the index do not register theirs.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from typing import TYPE_CHECKING

from journal.errors import ObjectExistsError
from journal.keys import is_segment
from journal.layout import LEASE_NAME

if TYPE_CHECKING:
    from collections.abc import Sequence

    from journal.store import ObjectStore

__all__ = ["COMPLETE_KEY", "INDEX_PREFIX", "ThreadIndex", "entry_of"]

INDEX_PREFIX = "~threads"
"""Where the entries are (a name no namespace can have: ``~`` is never encoded)."""

COMPLETE_KEY = f"{INDEX_PREFIX}/COMPLETE"
"""The marker: every thread of the store has an entry."""

_SUFFIX = ".t"
_HASHED = "~"  # never in a segment: a hashed segment starts with "%%"
# Below the 255 bytes a local file name may have, with room for a temporary name.
_MAX_NAME = 200
_LEVELS = 5
# What encode_segment writes, and the anonymous user's "~".
_SEGMENT = re.compile(r"[A-Za-z0-9_%-]+|~")
# An entry's name for _LEVELS such segments.
_ENTRY = re.compile(
    rf"(?:{_SEGMENT.pattern})(?:\.(?:{_SEGMENT.pattern})){{{_LEVELS - 1}}}"
)


def entry_of(prefix: str) -> tuple[str, bytes]:
    """The index entry of the thread at ``prefix``: its key and its bytes."""
    name = prefix.replace("/", ".") + _SUFFIX
    if len(name) <= _MAX_NAME:
        return f"{INDEX_PREFIX}/{name}", b""
    digest = hashlib.sha256(prefix.encode()).hexdigest()
    return f"{INDEX_PREFIX}/{_HASHED}{digest}{_SUFFIX}", prefix.encode()


class ThreadIndex:
    """The index of one store (see the module docstring)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._registered: set[str] = set()
        # None until looked up: whether COMPLETE exists (then it always will).
        self._complete: bool | None = None

    async def register(self, prefix: str) -> None:
        """Give the thread at ``prefix`` its entry, durably, before it is created.

        In a store that holds no thread yet, the ``COMPLETE`` marker is written
        first.
        """
        if prefix in self._registered:
            return
        if self._complete is None:
            self._complete = await self._exists(COMPLETE_KEY)
            if not self._complete and not await self._holds_threads():
                await self._create(COMPLETE_KEY, b"")
                self._complete = True
        await self._create(*entry_of(prefix))
        self._registered.add(prefix)

    async def threads(
        self, pattern: Sequence[str | None]
    ) -> list[tuple[str, ...]] | None:
        """The paths of the threads registered, sorted; None if incomplete.

        Each path is its five segments, level ``i`` equal to ``pattern[i]`` where
        that is not None. Only paths that hold a thread: its ``LEASE``, or (for
        one that lost it) any object.
        """
        keys = await self.store.list(f"{INDEX_PREFIX}/")
        if COMPLETE_KEY not in keys:
            return None
        self._complete = True
        start = len(INDEX_PREFIX) + 1
        paths: list[tuple[str, ...]] = []
        hashed: list[str] = []
        seen: set[str] = set()

        def add(segments: tuple[str, ...]) -> None:
            # Only paths a journal can have written: an entry put there by hand
            # ("..", an empty segment) names no thread, and no object is read for it.
            if len(segments) != _LEVELS:
                return
            for segment in segments:
                if segment not in seen:
                    if _SEGMENT.fullmatch(segment) is None:
                        return
                    seen.add(segment)
            paths.append(segments)

        whole = _ENTRY.fullmatch
        for key in keys:
            if not key.endswith(_SUFFIX):
                continue
            name = key[start : -len(_SUFFIX)]
            if whole(name) is not None:
                # Five well-formed segments, checked in one match: the common case.
                paths.append(tuple(name.split(".")))
            elif name.startswith(_HASHED):
                hashed.append(key)
            else:
                add(tuple(name.split(".")))
        if hashed:
            for data in await self.store.read_many(hashed):
                if data is not None:
                    add(tuple(data.decode("utf-8", "replace").split("/")))
        fixed = [(i, name) for i, name in enumerate(pattern) if name is not None]
        if fixed:
            wanted = {p for p in paths if all(p[i] == name for i, name in fixed)}
        else:
            wanted = set(paths)
        return await self._holding(sorted(wanted))

    async def build(self, paths: Sequence[tuple[str, ...]]) -> int:
        """Register the threads at ``paths`` (a walk found them), then mark complete.

        Returns:
            How many entries this call created.
        """
        items = [entry_of("/".join(p)) for p in paths]
        created = sum(await self.store.create_many(items))
        await self._create(COMPLETE_KEY, b"")
        self._complete = True
        self._registered.update("/".join(p) for p in paths)
        return created

    async def _holding(self, paths: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
        prefixes = ["/".join(p) for p in paths]
        leases = await self.store.exist_many([f"{p}/{LEASE_NAME}" for p in prefixes])
        kept: list[tuple[str, ...]] = []
        for path, prefix, has_lease in zip(paths, prefixes, leases, strict=True):
            # Without its LEASE a thread may still hold records (the walk lists
            # it too): rare, so one listing each.
            if has_lease or await self.store.list(f"{prefix}/"):
                kept.append(path)
        return kept

    async def _holds_threads(self) -> bool:
        # "~threads" and "~durable" are no namespace.
        return any(map(is_segment, await self.store.children("")))

    async def _exists(self, key: str) -> bool:
        return (await self.store.exist_many([key]))[0]

    async def _create(self, key: str, data: bytes) -> None:
        with contextlib.suppress(ObjectExistsError):
            await self.store.create(key, data)
