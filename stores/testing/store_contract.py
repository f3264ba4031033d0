"""The object-store contract: one pytest suite for every :class:`ObjectStore`.

Subclass :class:`StoreContract` and override its ``store`` fixture to run the whole
suite on a backend. The suite is backend-neutral: it assumes only what
:mod:`journal.store` promises, so the same tests run on memory, local disk and S3.

What it deliberately does not assume:

* Nothing about key layout beyond ``/``-separated keys: every test works under a
  fresh ``key_prefix``, so bindings may share one bucket or root between tests.
  A key is never also used as a "directory" (a file system cannot hold both).
* Etags are opaque. They change whenever the bytes change, and a write returns the
  etag that a following ``read`` reports, but a backend may hand out the same etag
  again when the same bytes come back (S3 and the local store use content digests).
* Bodies stay at or below 1 MiB: larger conditional writes are not atomic on some
  S3 emulators, so they would test the emulator rather than the backend.
"""

# ruff: noqa: S101

from __future__ import annotations

import asyncio
import hashlib
import uuid
from typing import TYPE_CHECKING

import pytest

from journal import layout
from journal.errors import (
    JournalError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageError,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from journal.store import ObjectStore

__all__ = ["StoreContract"]

_MIB = 1024 * 1024
_RACERS = 20


def _body(tag: str, size: int = 256) -> bytes:
    """Deterministic bytes of ``size`` that differ for every ``tag``."""
    seed = f"{tag}|".encode()
    return (seed * (size // len(seed) + 1))[:size]


def _noise(seed: str, size: int) -> bytes:
    """Deterministic, incompressible-looking bytes (all 256 values occur)."""
    return hashlib.shake_256(seed.encode()).digest(size)


def _version_key(version: int) -> str:
    """A record name as the journal writes it: 20-digit zero-padded."""
    return f"{layout.version_name(version)}{layout.RECORD_SUFFIX}"


async def _create_all(store: ObjectStore, keys: Iterable[str]) -> None:
    """Create ``keys`` concurrently, in a scrambled order, each holding its name."""
    order = sorted(keys, key=lambda k: hashlib.sha256(k.encode()).digest())
    await asyncio.gather(*(store.create(k, k.encode()) for k in order))


class StoreContract:
    """The behaviour every object store must show; bind it with a ``store`` fixture.

    Example:
        ``class TestLocalStore(StoreContract)`` with a fixture
        ``async def store(self, tmp_path): return LocalStore(tmp_path)``.
    """

    @pytest.fixture
    async def store(self) -> ObjectStore:
        """The store under test: every binding must override this fixture.

        Raises:
            NotImplementedError: The suite was run without a binding.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must override the 'store' fixture"
        )

    @pytest.fixture
    def key_prefix(self) -> str:
        """A fresh ``/``-terminated prefix, so tests never see each other's keys."""
        return f"contract-{uuid.uuid4().hex[:12]}/"

    # --- byte round trips -----------------------------------------------------

    @pytest.mark.parametrize(
        "data",
        [
            pytest.param(b"", id="empty"),
            pytest.param(b"hello", id="ascii"),
            pytest.param(
                bytes(range(256)) * 4 + b"\x00" * 64 + b"\r\n\x00\xff\n", id="binary"
            ),
            pytest.param(_noise("one-mib", _MIB), id="one-mib"),
        ],
    )
    async def test_round_trip(
        self, store: ObjectStore, key_prefix: str, data: bytes
    ) -> None:
        """``read`` returns exactly the bytes ``create`` stored, as ``bytes``."""
        key = f"{key_prefix}obj"
        etag = await store.create(key, data)
        got, read_etag = await store.read(key)
        assert type(got) is bytes
        assert len(got) == len(data)
        assert got == data
        assert isinstance(etag, str)
        assert etag
        assert read_etag == etag

    async def test_round_trip_after_replace(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """``replace`` stores bytes of any size exactly, shorter or longer."""
        key = f"{key_prefix}obj"
        etag = await store.create(key, _body("first", 4096))
        for data in (b"", _noise("replace", _MIB), b"\x00tail\x00"):
            etag = await store.replace(key, data, if_match=etag)
            assert await store.read(key) == (data, etag)

    async def test_nested_keys(self, store: ObjectStore, key_prefix: str) -> None:
        """Keys with several segments and percent-encoded names round-trip."""
        keys = [
            f"{key_prefix}a/b/c/d/e",
            f"{key_prefix}ns/agent%2Eone/~/s%2F1/main/LEASE",
            f"{key_prefix}x_y-z/00000000000000000001.rec",
        ]
        for key in keys:
            await store.create(key, key.encode())
        for key in keys:
            assert (await store.read(key))[0] == key.encode()

    # --- exclusive create -----------------------------------------------------

    async def test_create_is_exclusive(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """A second ``create`` fails with ObjectExistsError and changes nothing."""
        key = f"{key_prefix}once"
        etag = await store.create(key, b"first")
        with pytest.raises(ObjectExistsError):
            await store.create(key, b"second")
        assert await store.read(key) == (b"first", etag)

    async def test_create_race_has_one_winner(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """Of 20 concurrent creates of one key exactly one wins; its bytes stay.

        Five rounds, each on a fresh key, give a check-then-write race a chance
        to show.
        """
        for rnd in range(5):
            key = f"{key_prefix}race-{rnd}"
            bodies = [_body(f"{rnd}-racer-{i}", 16 * 1024) for i in range(_RACERS)]
            results = await asyncio.gather(
                *(store.create(key, body) for body in bodies), return_exceptions=True
            )
            winners = [i for i, r in enumerate(results) if isinstance(r, str)]
            assert len(winners) == 1, results
            (winner,) = winners
            losers = [r for i, r in enumerate(results) if i != winner]
            assert all(isinstance(r, ObjectExistsError) for r in losers), losers
            assert await store.read(key) == (bodies[winner], results[winner])

    async def test_concurrent_creates_of_distinct_keys(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """Concurrent creates of different keys all succeed and all are listed."""
        keys = [f"{key_prefix}many/{i:04d}" for i in range(50)]
        await _create_all(store, keys)
        assert await store.list(f"{key_prefix}many/") == keys
        assert await store.read_many(keys) == [k.encode() for k in keys]

    async def test_create_after_delete(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """A deleted key can be created again."""
        key = f"{key_prefix}again"
        await store.create(key, b"one")
        assert await store.delete(key) is True
        etag = await store.create(key, b"two")
        assert await store.read(key) == (b"two", etag)

    async def test_create_many(self, store: ObjectStore, key_prefix: str) -> None:
        """``create_many`` creates the missing keys and leaves existing ones as is."""
        await store.create(f"{key_prefix}batch/b", b"already here")
        items = [
            (f"{key_prefix}batch/a", _body("a", 40_000)),
            (f"{key_prefix}batch/b", b"would overwrite"),
            (f"{key_prefix}batch/deeper/c", b""),
            (f"{key_prefix}other/d", _body("d")),
        ]
        assert await store.create_many(items) == [True, False, True, True]
        assert await store.create_many([]) == []
        got = await store.read_many([k for k, _ in items])
        assert got == [items[0][1], b"already here", b"", items[3][1]]
        assert await store.list(f"{key_prefix}batch/") == [
            f"{key_prefix}batch/a",
            f"{key_prefix}batch/b",
            f"{key_prefix}batch/deeper/c",
        ]
        assert await store.leftovers(key_prefix) == []

    async def test_create_many_races_with_itself(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """Racing batches of the same keys create each key exactly once."""
        keys = [f"{key_prefix}same/{i:02d}" for i in range(8)]
        results = await asyncio.gather(
            *(store.create_many([(k, k.encode()) for k in keys]) for _ in range(5))
        )
        assert [sum(col) for col in zip(*results, strict=True)] == [1] * len(keys)
        assert await store.read_many(keys) == [k.encode() for k in keys]

    async def test_put_hint(self, store: ObjectStore, key_prefix: str) -> None:
        """``put_hint`` writes unconditionally; readers see the newest bytes."""
        key = f"{key_prefix}HINT"
        await store.put_hint(key, b"1")
        assert (await store.read(key))[0] == b"1"
        await store.put_hint(key, b"22")
        data, etag = await store.read(key)
        assert data == b"22"
        await store.replace(key, b"333", if_match=etag)
        assert (await store.read(key))[0] == b"333"
        assert await store.list(key_prefix) == [key]

    # --- compare-and-swap replace ---------------------------------------------

    async def test_replace_with_current_etag(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """``replace`` with the etag of the last write succeeds."""
        key = f"{key_prefix}cas"
        etag = await store.create(key, b"v1")
        new = await store.replace(key, b"v2", if_match=etag)
        assert await store.read(key) == (b"v2", new)

    async def test_replace_with_etag_from_read(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """The etag ``read`` reports is accepted by ``replace``."""
        key = f"{key_prefix}cas"
        await store.create(key, b"v1")
        _, etag = await store.read(key)
        new = await store.replace(key, b"v2", if_match=etag)
        assert await store.read(key) == (b"v2", new)

    async def test_replace_with_stale_etag_writes_nothing(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """A stale etag raises PreconditionFailedError and leaves the object as is."""
        key = f"{key_prefix}cas"
        stale = await store.create(key, b"v1")
        current = await store.replace(key, b"v2", if_match=stale)
        with pytest.raises(PreconditionFailedError):
            await store.replace(key, b"v3", if_match=stale)
        assert await store.read(key) == (b"v2", current)

    async def test_replace_with_etag_on_missing_key(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """An etag for a key that does not exist raises ObjectNotFoundError."""
        etag = await store.create(f"{key_prefix}other", b"v1")
        missing = f"{key_prefix}missing"
        with pytest.raises(ObjectNotFoundError):
            await store.replace(missing, b"v1", if_match=etag)
        with pytest.raises(ObjectNotFoundError):
            await store.read(missing)
        assert await store.list(key_prefix) == [f"{key_prefix}other"]

    async def test_replace_of_deleted_key_with_old_etag(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """A CAS on a key deleted since it was read fails and does not recreate it."""
        key = f"{key_prefix}gone"
        etag = await store.create(key, b"v1")
        await store.delete(key)
        with pytest.raises(ObjectNotFoundError):
            await store.replace(key, b"v2", if_match=etag)
        with pytest.raises(ObjectNotFoundError):
            await store.read(key)

    async def test_unconditional_replace(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """``if_match=None`` creates a missing key and overwrites an existing one."""
        key = f"{key_prefix}hint"
        first = await store.replace(key, b"v1", if_match=None)
        assert await store.read(key) == (b"v1", first)
        second = await store.replace(key, b"v2", if_match=None)
        assert await store.read(key) == (b"v2", second)
        with pytest.raises(ObjectExistsError):
            await store.create(key, b"v3")

    async def test_etag_changes_on_every_write(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """Every write of new bytes yields a new etag, and ``read`` reports it."""
        key = f"{key_prefix}etag"
        etags = [await store.create(key, b"v0")]
        for i in range(1, 5):
            if_match = etags[-1] if i % 2 else None
            etags.append(await store.replace(key, f"v{i}".encode(), if_match=if_match))
            assert (await store.read(key))[1] == etags[-1]
        assert len(set(etags)) == len(etags), etags

    async def test_replace_race_has_one_winner_per_etag(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """Of 20 concurrent CAS writes against one etag exactly one wins."""
        key = f"{key_prefix}lease"
        first = etag = await store.create(key, b"epoch-0")
        for rnd in range(1, 4):
            bodies = [_body(f"epoch-{rnd}-racer-{i}", 4096) for i in range(_RACERS)]
            results = await asyncio.gather(
                *(store.replace(key, body, if_match=etag) for body in bodies),
                return_exceptions=True,
            )
            winners = [i for i, r in enumerate(results) if isinstance(r, str)]
            assert len(winners) == 1, results
            (winner,) = winners
            losers = [r for i, r in enumerate(results) if i != winner]
            assert all(isinstance(r, PreconditionFailedError) for r in losers), losers
            new_etag = results[winner]
            assert isinstance(new_etag, str)
            assert await store.read(key) == (bodies[winner], new_etag)
            etag = new_etag
        # The etag of the first round is long stale: nobody may win with it.
        results = await asyncio.gather(
            *(store.replace(key, b"zombie", if_match=first) for _ in range(5)),
            return_exceptions=True,
        )
        assert all(isinstance(r, PreconditionFailedError) for r in results), results
        assert (await store.read(key))[1] == etag

    # --- read -----------------------------------------------------------------

    async def test_read_missing(self, store: ObjectStore, key_prefix: str) -> None:
        """Reading a key that was never written raises ObjectNotFoundError."""
        with pytest.raises(ObjectNotFoundError):
            await store.read(f"{key_prefix}never")

    async def test_read_many(self, store: ObjectStore, key_prefix: str) -> None:
        """``read_many`` keeps the order of its keys; a missing key gives None."""
        a, b = f"{key_prefix}a", f"{key_prefix}b"
        await store.create(a, b"A")
        await store.create(b, b"B")
        missing = f"{key_prefix}missing"
        assert await store.read_many([a, missing, b, a]) == [b"A", None, b"B", b"A"]
        assert await store.read_many([]) == []
        assert await store.read_many([missing], concurrency=1) == [None]

    async def test_read_siblings(self, store: ObjectStore, key_prefix: str) -> None:
        """``read_siblings`` reads ``prefix + name`` as ``read_many`` would.

        ``read_sibling_buffers`` gives the same bytes. Records (kept in segment
        files by the local store), blobs and plain files, missing and deleted ones
        as None, in the order asked; a name that is not one path segment is refused
        (the local store also refuses what its keys refuse, such as a leading
        ``.``).
        """
        log = f"{key_prefix}t/log/"
        names = [f"{v:020d}.rec" for v in (3, 1, 2)]
        for name in names[1:]:
            await store.create(log + name, name.encode())
        await store.create(log + "plain", b"p")
        await store.create(log + names[0], b"gone")
        assert await store.delete(log + names[0])
        asked = [*names, "plain", "nope", names[1]]
        expected = await store.read_many([log + n for n in asked])
        assert expected == [None, names[1].encode(), names[2].encode(), b"p", None,
                            names[1].encode()]  # fmt: skip
        assert await store.read_siblings(log, asked) == expected
        assert await store.read_siblings(log, []) == []
        # The buffers (perhaps views of one read) hold the same bytes.
        buffers = await store.read_sibling_buffers(log, asked)
        assert [None if b is None else bytes(b) for b in buffers] == expected
        assert await store.read_sibling_buffers(log, []) == []
        for bad in ("a/b", ""):
            with pytest.raises(ValueError, match="invalid object key"):
                await store.read_siblings(log, [names[1], bad])
            with pytest.raises(ValueError, match="invalid object key"):
                await store.read_sibling_buffers(log, [names[1], bad])
        # A prefix must name a "directory": the local store once read the object
        # beside it (``t/LEASE`` for ``t/log`` + ``LEASE``).
        await store.create(f"{key_prefix}t/LEASE", b"lease")
        for read in (store.read_siblings, store.read_sibling_buffers):
            with pytest.raises(ValueError, match="must end with '/'"):
                await read(log.rstrip("/"), ["LEASE"])

    async def test_exist_many(self, store: ObjectStore, key_prefix: str) -> None:
        """``exist_many`` says which keys exist, in order: records, blobs and files.

        A deleted object no longer exists, and a "directory" is no object.
        """
        record = f"{key_prefix}t/log/{1:020d}.rec"
        blob = f"{key_prefix}t/blobs/{'ab' * 32}"
        plain = f"{key_prefix}t/LEASE"
        gone = f"{key_prefix}t/log/{2:020d}.rec"
        for key in (record, blob, plain, gone):
            await store.create(key, b"x")
        assert await store.delete(gone)
        keys = [plain, f"{key_prefix}t", record, gone, blob, f"{key_prefix}nope"]
        assert await store.exist_many(keys) == [True, False, True, False, True, False]
        assert await store.exist_many([]) == []

    async def test_list_and_read(self, store: ObjectStore, key_prefix: str) -> None:
        """``list_and_read`` gives what ``list`` and ``read_many`` of it would.

        Record names (which the local store keeps in segment files) and other names
        alike; ``limit`` bounds what is read, never what is listed.
        """
        log = f"{key_prefix}log/"
        names = [f"{v:020d}.rec" for v in range(1, 6)] + ["plain"]
        for name in names:
            await store.create(log + name, name.encode())
        keys = [log + n for n in sorted(names)]
        data = [k.removeprefix(log).encode() for k in keys]
        assert await store.list_and_read(log, limit=10) == (keys, data)
        # From a parent prefix, names below it in a subdirectory alike.
        assert await store.list_and_read(key_prefix, limit=10) == (keys, data)
        after = await store.list_and_read(log, start_after=keys[1], limit=2)
        assert after == (keys[2:], data[2:4])
        assert await store.list_and_read(log, start_after=keys[-1], limit=5) == ([], [])
        assert await store.list_and_read(log, limit=0) == (keys, [])
        assert await store.list_and_read(f"{key_prefix}none/", limit=3) == ([], [])

    # --- list -----------------------------------------------------------------

    async def test_list_is_lexicographic_and_recursive(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """``list`` returns full keys, recursively, sorted over the whole key.

        ``-`` and ``.`` sort before ``/``, so ``b-x`` and ``b.y`` come before the
        keys under ``b/``: a per-directory walk would get this wrong.
        """
        names = ["a", "b-x", "b.y", "b/c", "b/d/e", "b/d/f/g", "b0", "c", "~"]
        await _create_all(store, [key_prefix + n for n in names])
        listed = await store.list(key_prefix)
        assert listed == [key_prefix + n for n in sorted(names)]
        assert listed == sorted(listed)
        assert await store.list(f"{key_prefix}b/") == [
            f"{key_prefix}b/c",
            f"{key_prefix}b/d/e",
            f"{key_prefix}b/d/f/g",
        ]

    async def test_list_zero_padded_versions(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """20-digit zero-padded names list in numeric order."""
        versions = [1, 2, 9, 10, 11, 99, 100, 101, 999, 1000, 12345, 10**19]
        log = f"{key_prefix}log/"
        await _create_all(store, [log + _version_key(v) for v in versions])
        assert await store.list(log) == [log + _version_key(v) for v in versions]

    async def test_list_excludes_sibling_prefixes(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """A prefix matches whole segments: ``log/`` does not list ``logs/``."""
        names = ["log/1", "log-old", "log.bak", "logs/1", "lo/1", "log/sub/2"]
        await _create_all(store, [key_prefix + n for n in names])
        assert await store.list(f"{key_prefix}log/") == [
            f"{key_prefix}log/1",
            f"{key_prefix}log/sub/2",
        ]

    async def test_list_prefix_without_trailing_slash(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """A prefix names a directory with or without its trailing ``/``."""
        await _create_all(store, [f"{key_prefix}d/1", f"{key_prefix}d/2"])
        assert await store.list(f"{key_prefix}d") == await store.list(f"{key_prefix}d/")

    async def test_list_start_after(self, store: ObjectStore, key_prefix: str) -> None:
        """``start_after`` is strict and need not name an existing key."""
        log = f"{key_prefix}log/"
        keys = [log + _version_key(v) for v in range(1, 13)]
        await _create_all(store, keys)
        # A key that exists: strictly after it.
        assert await store.list(log, start_after=keys[4]) == keys[5:]
        # A key that does not exist (between 5 and 6, and before the first one).
        assert await store.list(log, start_after=keys[4] + "a") == keys[5:]
        assert await store.list(log, start_after=log + "0") == keys
        # The last key, and a key past the end.
        assert await store.list(log, start_after=keys[-1]) == []
        assert await store.list(log, start_after=f"{log}~") == []
        assert await store.list(log, start_after=f"{key_prefix}zzz") == []
        # Before the prefix: everything under it.
        assert await store.list(log, start_after=log) == keys
        assert await store.list(log, start_after=key_prefix) == keys

    async def test_list_start_after_across_directories(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """``start_after`` compares full keys, also inside nested directories."""
        names = ["a/1", "a/2", "b/1", "b/c/1", "b/c/2", "c"]
        await _create_all(store, [key_prefix + n for n in names])
        after = await store.list(key_prefix, start_after=f"{key_prefix}b/c/1")
        assert after == [f"{key_prefix}b/c/2", f"{key_prefix}c"]
        after = await store.list(key_prefix, start_after=f"{key_prefix}a/3")
        assert after == [key_prefix + n for n in names[2:]]

    async def test_list_missing_prefix(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """Listing a prefix that holds nothing returns an empty list."""
        assert await store.list(f"{key_prefix}nothing/here/") == []
        assert await store.list(key_prefix, start_after=key_prefix) == []
        await store.create(f"{key_prefix}thing", b"x")
        assert await store.list(f"{key_prefix}nothing/") == []

    async def test_list_sees_writes_and_deletes(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """``list`` is consistent with every completed create and delete."""
        keys = [f"{key_prefix}k{i}" for i in range(5)]
        for n, key in enumerate(keys, 1):
            await store.create(key, b"x")
            assert await store.list(key_prefix) == keys[:n]
        await store.delete(keys[2])
        assert await store.list(key_prefix) == keys[:2] + keys[3:]

    # --- children -------------------------------------------------------------

    async def test_children(self, store: ObjectStore, key_prefix: str) -> None:
        """``children`` names the immediate sub-directories, sorted, once each."""
        names = ["y/z/2", "x/1", "x/2", "file", "w-1/3", "y/4"]
        await _create_all(store, [key_prefix + n for n in names])
        assert await store.children(key_prefix) == ["w-1", "x", "y"]
        assert await store.children(f"{key_prefix}y/") == ["z"]
        assert await store.children(f"{key_prefix}y") == ["z"]
        assert await store.children(f"{key_prefix}x/") == []

    async def test_descendants(self, store: ObjectStore, key_prefix: str) -> None:
        """``descendants`` walks a pattern of names and wildcards, as children would.

        Every backend must give what walking ``children`` level by level gives
        (the default does exactly that; the local store walks in one call).
        """
        names = [
            "a/s1/t1/LEASE", "a/s1/t2/log/x", "a/s2/t1/LEASE", "b/s1/t9/LEASE",
            "b/s3/file", "a/s1/t3/deep/er/1",
        ]  # fmt: skip
        await _create_all(store, [key_prefix + n for n in names])
        await store.delete(f"{key_prefix}a/s2/t1/LEASE")  # an emptied directory
        # A directory named like a thread's LEASE file proves nothing once empty.
        await store.create(f"{key_prefix}a/s4/t1/LEASE/x", b"x")
        await store.delete(f"{key_prefix}a/s4/t1/LEASE/x")
        assert await store.descendants(key_prefix, [None, None, None]) == [
            ("a", "s1", "t1"),
            ("a", "s1", "t2"),
            ("a", "s1", "t3"),
            ("b", "s1", "t9"),
        ]
        assert await store.descendants(key_prefix, ["a", None, None]) == [
            ("a", "s1", "t1"),
            ("a", "s1", "t2"),
            ("a", "s1", "t3"),
        ]
        assert await store.descendants(key_prefix, [None, "s1", "t9"]) == [
            ("b", "s1", "t9")
        ]
        assert await store.descendants(key_prefix, ["zz", None, None]) == []
        assert await store.descendants(key_prefix, [None, None]) == [
            ("a", "s1"),
            ("b", "s1"),
            ("b", "s3"),
        ]
        assert await store.descendants(f"{key_prefix}a", [None, None]) == [
            ("s1", "t1"),
            ("s1", "t2"),
            ("s1", "t3"),
        ]

    async def test_children_of_missing_prefix(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """A prefix that holds nothing has no children."""
        assert await store.children(f"{key_prefix}nothing/") == []

    async def test_children_forget_emptied_directories(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """Once its last key is deleted, a directory is no longer a child."""
        await store.create(f"{key_prefix}gone/deep/1", b"x")
        await store.create(f"{key_prefix}kept/1", b"x")
        await store.delete(f"{key_prefix}gone/deep/1")
        assert await store.children(key_prefix) == ["kept"]
        assert await store.list(f"{key_prefix}gone/") == []

    # --- delete ---------------------------------------------------------------

    async def test_delete(self, store: ObjectStore, key_prefix: str) -> None:
        """``delete`` reports whether the key existed, and the key is gone."""
        key = f"{key_prefix}doomed"
        await store.create(key, b"x")
        assert await store.delete(key) is True
        assert await store.delete(key) is False
        assert await store.delete(f"{key_prefix}never") is False
        with pytest.raises(ObjectNotFoundError):
            await store.read(key)
        assert await store.read_many([key]) == [None]

    # --- error mapping --------------------------------------------------------

    async def test_failures_are_storage_errors(
        self, store: ObjectStore, key_prefix: str
    ) -> None:
        """Each failure is a specific, non-transient StorageError naming its key.

        No native exception (``OSError``, ``KeyError``, a client error) escapes.
        """
        key = f"{key_prefix}k"
        missing = f"{key_prefix}missing"
        stale = await store.create(key, b"one")
        await store.replace(key, b"two", if_match=None)
        cases: list[tuple[Callable[[], Awaitable[object]], type[StorageError], str]] = [
            (lambda: store.create(key, b"again"), ObjectExistsError, key),
            (lambda: store.read(missing), ObjectNotFoundError, missing),
            (
                lambda: store.replace(key, b"x", if_match=stale),
                PreconditionFailedError,
                key,
            ),
            (
                lambda: store.replace(missing, b"x", if_match=stale),
                ObjectNotFoundError,
                missing,
            ),
        ]
        for operation, expected, named in cases:
            with pytest.raises(StorageError) as info:
                await operation()
            exc = info.value
            assert type(exc) is expected, repr(exc)
            assert isinstance(exc, JournalError)
            assert not isinstance(exc, (OSError, LookupError, ValueError))
            assert exc.transient is False
            assert named in str(exc)
        # The failed operations wrote nothing.
        assert await store.list(key_prefix) == [key]
        assert (await store.read(key))[0] == b"two"
