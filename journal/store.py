"""The object-store protocol: the one seam between the engine and its backends.

A store holds immutable-or-CAS objects under ``/``-separated keys relative to its root.
The journal needs only five primitives, each with a stated guarantee:

* ``create(key, data)``: exclusive. Exactly one of any number of racing creators of
  a key succeeds; the others get :class:`~journal.errors.ObjectExistsError`. No reader
  ever sees a partial object under the key.
* ``replace(key, data, if_match=etag)``: compare-and-swap against the etag of the
  last read or write; a mismatch raises :class:`~journal.errors.PreconditionFailedError`
  and writes nothing. ``if_match=None`` overwrites unconditionally (hints only).
* ``read(key)``: the whole object, strongly consistent with completed writes.
* ``list(prefix, start_after=)``: keys under ``prefix`` in lexicographic order,
  strictly after ``start_after``; consistent with completed writes and deletes.
* ``delete(key)``: remove; returns whether the key existed.

Three conveniences have defaults built on those: ``create_many`` (immutable,
content-addressed objects in one batch), ``put_hint`` (an unconditional write
that need not be durable) and ``list_and_read`` (a listing and the first objects
it names). Backends override them where a batch, a skipped sync or one round trip
is cheaper.

One report has a default: ``quarantined`` (bytes a backend cut from a damaged
tail and kept, rather than destroy what it cannot prove was never acknowledged);
only the local store's segment files ever quarantine anything.

Backends never let a native exception escape: they raise ``StorageError`` subclasses
(``transient=True`` for errors worth retrying) with the native one as ``__cause__``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

import msgspec

from journal.loopless import gather, limiter

if TYPE_CHECKING:
    import builtins
    from collections.abc import Sequence

__all__ = ["ObjectStore", "Quarantined", "check_sibling_prefix"]


class Quarantined(msgspec.Struct, frozen=True):
    """Bytes a store cut from the tail of one of its files and kept aside.

    Attributes:
        location: Where the bytes are kept (a file path an operator can open).
        key: The key of the object the bytes hold, when it could be read (None
            otherwise).
        data: That object's bytes, when they were recovered whole (their own
            checksum holds); None otherwise.
        torn: True when the bytes are provably an interrupted write, never
            acknowledged (the file may then be deleted); False when they may
            hold an acknowledged object.
        detail: What was found, readable.
        in_place: True when the bytes were not cut but are still where they were
            written: a damaged frame that readers read with one flipped header bit
            put back (``data`` is then None: the object reads back as usual), or
            a torn-looking tail no writer has cut yet.
    """

    location: str
    key: str | None
    data: bytes | None
    torn: bool
    detail: str
    in_place: bool = False


def check_sibling_prefix(prefix: str) -> None:
    """Refuse a ``read_siblings`` prefix that does not name a "directory".

    Raises:
        ValueError: ``prefix`` is not empty and does not end with ``/``.
    """
    if prefix and not prefix.endswith("/"):
        raise ValueError(f"a sibling read's prefix must end with '/': {prefix!r}")


class ObjectStore(abc.ABC):
    """Async object store with exclusive create and compare-and-swap replace.

    Attributes:
        url: The URL the store was opened with (for messages).
        writable: False for stores that cannot guarantee exclusive create; the
            journal opens them read-only.
        reads_log_in_bulk: True when reading a thread's records in version order
            costs about what reading the same bytes as a few larger objects does
            (local segment files). Checkpoints on such a store name the records
            that hold their messages (log spans) instead of copying the messages
            into chunk blobs; elsewhere (S3: a request per record) they copy them.
        local_directory: The absolute local directory holding the objects (a
            local store); None for any other store.
    """

    url: str = ""
    writable: bool = True
    reads_log_in_bulk: bool = False
    local_directory: str | None = None

    @abc.abstractmethod
    async def create(self, key: str, data: bytes) -> str:
        """Create ``key`` holding ``data`` if and only if it does not exist.

        Returns:
            The new object's etag.

        Raises:
            ObjectExistsError: The key exists (possibly written by our own earlier
                attempt whose reply was lost: the caller reads it to decide).
            StorageError: The backend failed; the object may or may not exist.
        """

    @abc.abstractmethod
    async def replace(self, key: str, data: bytes, *, if_match: str | None) -> str:
        """Overwrite ``key`` if its etag is still ``if_match``.

        Args:
            key: The object's key.
            data: The new bytes.
            if_match: The etag the caller last saw; None writes unconditionally
                (creating the key if needed).

        Returns:
            The new etag.

        Raises:
            PreconditionFailedError: The object's etag differs. On object stores
                this can also follow a lost reply to our own write that landed
                (the retry finds the new etag): callers re-read the object, which
                identifies its writer, before deciding.
            ObjectNotFoundError: ``if_match`` was given but the key does not exist.
        """

    @abc.abstractmethod
    async def read(self, key: str) -> tuple[bytes, str]:
        """Read a whole object.

        Returns:
            The bytes and the etag.

        Raises:
            ObjectNotFoundError: No such key.
        """

    @abc.abstractmethod
    async def list(
        self, prefix: str, *, start_after: str | None = None
    ) -> builtins.list[str]:
        """List the keys under ``prefix`` (a "directory", ending in ``/``).

        Returns:
            Full keys (relative to the store's root), sorted lexicographically,
            recursively, strictly after ``start_after`` when given.
        """

    @abc.abstractmethod
    async def delete(self, key: str) -> bool:
        """Delete ``key``; return whether it existed."""

    @abc.abstractmethod
    async def children(self, prefix: str) -> builtins.list[str]:
        """The names of the immediate sub-"directories" of ``prefix``, sorted."""

    async def descendants(
        self, prefix: str, pattern: Sequence[str | None]
    ) -> builtins.list[tuple[str, ...]]:
        """The "directory" paths ``len(pattern)`` levels below ``prefix``, sorted.

        Level ``i`` of a path is ``pattern[i]`` where that is a name, any child
        where it is None. Only paths that hold an object are returned, each as its
        tuple of names. The default walks :meth:`children` level by level; a
        backend that can walk a tree in one call (the local store) overrides it.
        """
        prefix = prefix.strip("/")
        found: builtins.list[tuple[str, ...]] = [()]
        last = len(pattern) - 1
        for level, name in enumerate(pattern):
            deeper: builtins.list[tuple[str, ...]] = []
            for path in found:
                if name is not None and level < last:
                    # A name that is not there shows as no children one level down.
                    deeper.append((*path, name))
                    continue
                base = "/".join(p for p in (prefix, *path) if p)
                names = await self.children(base)
                if name is None:
                    deeper.extend((*path, c) for c in names)
                elif name in names:
                    deeper.append((*path, name))
            found = deeper
        return found

    async def create_derived(self, key: str, data: bytes) -> bool:
        """Create an object that can be rebuilt from others (a checkpoint).

        Exclusive like :meth:`create`, but it need not be durable when this returns:
        the local store skips its syncs, and the object becomes durable with the
        file system's own writeback, or :meth:`flush`. A power cut before that may
        lose it or leave it unreadable, never half-visible as something else; its
        readers must cope (a checkpoint is skipped and rebuilt from the log). The
        default is :meth:`create`.

        Returns:
            Whether it was created (False: the key existed).
        """
        from journal.errors import ObjectExistsError

        try:
            await self.create(key, data)
        except ObjectExistsError:
            return False
        return True

    async def replace_unsynced(
        self, key: str, data: bytes, *, if_match: str | None
    ) -> str:
        """:meth:`replace`, not necessarily durable when it returns.

        For an object whose older value is as good after a power cut (a lease
        renewed by its own holder). Readers see the new value once it returns; one
        that reads while it runs may find a mix of the old and new bytes (the local
        store overwrites an object of the same size in place), and a power cut may
        bring back the old one or leave the object unreadable. Readers of such an
        object check it and read again. The default is :meth:`replace`.
        """
        return await self.replace(key, data, if_match=if_match)

    async def create_many_derived(
        self, items: Sequence[tuple[str, bytes]]
    ) -> builtins.list[bool]:
        """:meth:`create_many` for objects that can be rebuilt (checkpoint chunks).

        As :meth:`create_derived`: durable only once flushed or written back,
        except that an object seen under its name always holds its whole bytes
        (content-addressed names are never rewritten, so a torn one would stay).
        The default is :meth:`create_many`.
        """
        return await self.create_many(items)

    async def flush(self, keys: Sequence[str]) -> None:
        """Make objects written by :meth:`create_derived` (or its batch) durable.

        Before anything relies on them alone: a record that references a chunk,
        retention that removes the records a checkpoint covers. Keys that do not
        exist are left alone. The default does nothing, for backends whose every
        write is durable when it returns.
        """
        del keys

    async def mark_unsynced(self, prefix: str) -> None:
        """Note that this store's writes under ``prefix`` may not be durable.

        Called by a writer before it writes there, on a store that does not sync
        (a local store opened with ``fsync=False``), so that a writer of a store
        that does sync makes those writes durable before it builds on them
        (:meth:`make_durable`). The default does nothing: other backends' writes
        are durable when they return, or never.
        """
        del prefix

    async def make_durable(self, prefix: str) -> None:
        """Make durable what a store that does not sync left under ``prefix``.

        Before a writer that syncs builds on it: everything :meth:`mark_unsynced`
        flagged there, and the directories that lead to it. Cheap when nothing
        was flagged. The default does nothing (see :meth:`mark_unsynced`).
        """
        del prefix

    async def read_many(
        self, keys: Sequence[str], *, concurrency: int = 16
    ) -> builtins.list[bytes | None]:
        """Read several objects concurrently; a missing one is None.

        Backends where one batched call is cheaper than many override this.
        """
        from journal.errors import ObjectNotFoundError

        sem = limiter(concurrency)

        async def one(key: str) -> bytes | None:
            async with sem:
                try:
                    return (await self.read(key))[0]
                except ObjectNotFoundError:
                    return None

        return await gather(*(one(k) for k in keys))

    async def read_buffers(
        self, keys: Sequence[str]
    ) -> builtins.list[bytes | memoryview | None]:
        """:meth:`read_many` for bytes decoded once and dropped; a missing one is None.

        A backend may hand back views of one larger read instead of copies (the
        local store does for objects of one segment file): each keeps that read's
        buffer alive. The default is :meth:`read_many`.
        """
        return list(await self.read_many(keys))

    async def read_siblings(
        self, prefix: str, names: Sequence[str]
    ) -> builtins.list[bytes | None]:
        """Read the objects ``prefix + name`` of one "directory"; a missing one is None.

        ``prefix`` ends with ``/`` and no name holds one: a thread's records, read a
        run at a time. The default is :meth:`read_many`; the local store looks the
        directory up once instead of once per key.

        Raises:
            ValueError: ``prefix`` is not empty and does not end with ``/``, or a
                name is empty or holds a ``/`` (or is otherwise not a valid last
                part of a key for this store).
        """
        check_sibling_prefix(prefix)
        for name in names:
            if not name or "/" in name:
                raise ValueError(f"invalid object key {prefix + name!r}")
        return await self.read_many([prefix + name for name in names])

    async def read_sibling_buffers(
        self, prefix: str, names: Sequence[str]
    ) -> builtins.list[bytes | memoryview | None]:
        """:meth:`read_siblings` for bytes parsed once and dropped.

        A log's records read to rebuild state, say. As with :meth:`read_buffers`,
        a backend may hand back views of one larger read instead of copies (the
        local store does for records of one segment file). The default is
        :meth:`read_siblings`.

        Raises:
            ValueError: As :meth:`read_siblings`.
        """
        return list(await self.read_siblings(prefix, names))

    async def exist_many(self, keys: Sequence[str]) -> builtins.list[bool]:
        """Whether each of ``keys`` exists.

        The default reads them (``read_many``); a backend that can tell without
        reading overrides it (the local store stats the files).
        """
        return [data is not None for data in await self.read_many(keys)]

    async def list_and_read(
        self, prefix: str, *, start_after: str | None = None, limit: int
    ) -> tuple[builtins.list[str], builtins.list[bytes | None]]:
        """``list``, and the bytes of the first ``limit`` keys it found.

        What a reader of a log's tail needs: the default lists, then reads with
        ``read_many``; the local store does both in one hop to its worker thread.

        Returns:
            The keys (as ``list`` gives them) and the bytes of the first ``limit``
            of them, in order; None for one deleted after it was listed.
        """
        keys = await self.list(prefix, start_after=start_after)
        data = await self.read_many(keys[:limit]) if limit > 0 else []
        return keys, data

    async def create_many(
        self, items: Sequence[tuple[str, bytes]], *, concurrency: int = 16
    ) -> builtins.list[bool]:
        """Create several immutable objects, leaving those that already exist.

        Meant for content-addressed objects, where an existing key already holds
        the same bytes. Every object is durable when this returns; backends make
        that cheaper than one ``create`` each where they can (the local store syncs
        the directory once for all of them, object stores send them concurrently).

        Returns:
            Per item, whether this call created it (False: the key existed).

        Raises:
            StorageError: The backend failed; some of the objects may exist.
        """
        from journal.errors import ObjectExistsError

        sem = limiter(concurrency)

        async def one(key: str, data: bytes) -> bool:
            async with sem:
                try:
                    await self.create(key, data)
                except ObjectExistsError:
                    return False
                return True

        return await gather(*(one(k, d) for k, d in items))

    async def put_hint(self, key: str, data: bytes) -> None:
        """Overwrite a hint: an object readers verify and can do without.

        Unconditional like ``replace(if_match=None)``, but the write need not
        survive a crash (a lost or garbled hint only sends readers the slow way),
        so a backend may skip the syncs that ``replace`` pays for.
        """
        await self.replace(key, data, if_match=None)

    async def leftovers(self, prefix: str) -> builtins.list[str]:
        """Temporary objects left under ``prefix`` by interrupted writes."""
        return []

    async def remove_leftovers(self, prefix: str, *, older_than: float) -> int:
        """Delete temporary objects under ``prefix`` untouched for ``older_than`` s.

        Called by a writer once its fence is committed: every earlier writer of
        the thread is fenced by then, so their temporary objects are writes that
        were never acknowledged. The age spares one that a reader's checkpoint is
        writing right now. Returns how many were removed; the default removes none.
        """
        return 0

    async def quarantined(self, prefix: str) -> builtins.list[Quarantined]:
        """Bytes cut from damaged file tails under ``prefix`` and kept aside.

        The default, for stores that never cut anything, is empty. The local store
        reports what its segment files' torn-looking tails held (see
        :mod:`stores.segments`).
        """
        return []

    async def aclose(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release connections; the default holds none."""
