"""A holder's own LEASE writes overwrite the file in place on local disk.

Renewals, idle marks and the release are written without a sync at the holder's
epoch. Renaming a new file over ``LEASE`` made ext4 write the new file's data back
at once; the lease is encoded at one size per holder instead, and the local store
overwrites an object of the same size where it lies. Acquisitions (a new epoch)
still go through a synced file renamed into place. A reader that races an
overwrite may copy it half written: lease readers read it again.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import Agent, Journal, ModelResponse, RuntimeContext, ThreadKey
from journal import events as ev
from journal.engine.lease import (
    LeaseRecord,
    decode_lease,
    encode_lease,
    inspect_lease,
)
from journal.errors import ObjectNotFoundError, PreconditionFailedError
from stores.local import LocalStore
from stores.memory import MemoryStore

if TYPE_CHECKING:
    from pathlib import Path

KEY = ThreadKey("agent", "s1", "alice")


def _lease_path(root: Path, key: ThreadKey = KEY) -> Path:
    return root / key.prefix / "LEASE"


class _Held:
    """An open descriptor of a file: still the file at ``path`` only if no new
    file was renamed over it (a file renamed over is unlinked, and while it is held
    open its inode number cannot be given to another file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)

    def still_there(self) -> bool:
        held = os.fstat(self.fd)
        return held.st_nlink == 1 and os.stat(self.path).st_ino == held.st_ino

    def content(self) -> bytes:
        return os.pread(self.fd, 1 << 16, 0)

    def close(self) -> None:
        os.close(self.fd)


def _temporaries(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(".tmp")]


# --- the encoding ---------------------------------------------------------------


def test_a_holders_leases_all_encode_at_one_size() -> None:
    rng = random.Random(7)  # noqa: S311 (test data)
    for holder in ("a", "node-7f3a9c", "ünïcødé holder " * 3, 'quote" \\ holder'):
        sizes = set()
        for _ in range(300):
            now = rng.choice([0.0, 1.0, 1e9, 1764815234.0]) + rng.random()
            record = LeaseRecord(
                holder,
                rng.randrange(1, 2**53),
                now + rng.choice([0.001, 30.0, 1e6]),
                now,
                rng.choice([0.5, 30.0, 86400.0, 1 / 3]),
                rng.random() < 0.5,
            )
            data = encode_lease(record)
            sizes.add(len(data))
            decoded, damage, checked = decode_lease(data)
            assert (decoded, damage, checked) == (record, None, True)
        assert len(sizes) == 1, (holder, sizes)


def test_the_padding_is_whitespace_after_the_object() -> None:
    record = LeaseRecord("node-a", 3, 1764815264.25, 1764815234.5, 30.0)
    data = encode_lease(record)
    body = data.rstrip(b" ")
    assert data[len(body) :].strip(b" ") == b""
    assert msgspec.json.decode(body) == msgspec.json.decode(data)
    assert msgspec.json.decode(data)["epoch"] == 3


# --- the local store --------------------------------------------------------------


async def test_replace_unsynced_at_the_same_size_overwrites_in_place(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path)
    await store.create("t/LEASE", b"lease one")
    path = tmp_path / "t" / "LEASE"
    held = _Held(path)
    _, etag = await store.read("t/LEASE")
    new_etag = await store.replace_unsynced("t/LEASE", b"lease two", if_match=etag)
    assert held.still_there()
    assert held.content() == b"lease two"
    held.close()
    data, read_etag = await store.read("t/LEASE")
    assert (data, read_etag) == (b"lease two", new_etag)
    assert _temporaries(path.parent) == []
    # A stale etag is refused and changes nothing.
    with pytest.raises(PreconditionFailedError):
        await store.replace_unsynced("t/LEASE", b"lease 333", if_match=etag)
    assert (await store.read("t/LEASE"))[0] == b"lease two"
    await store.aclose()


async def test_replace_unsynced_of_another_size_still_replaces_the_file(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path)
    etag = await store.create("t/LEASE", b"a longer lease")
    etag = await store.replace_unsynced("t/LEASE", b"short", if_match=etag)
    assert (await store.read("t/LEASE")) == (b"short", etag)
    etag = await store.replace_unsynced("t/LEASE", b"longer again", if_match=etag)
    assert (await store.read("t/LEASE")) == (b"longer again", etag)
    assert _temporaries(tmp_path / "t") == []
    await store.aclose()


async def test_an_overwrite_after_a_takeover_fails_and_leaves_the_new_lease(
    tmp_path: Path,
) -> None:
    """The takeover renames a new file over LEASE; the old holder's overwrite opens
    the path under the lock, finds the new content and writes nothing."""
    store = LocalStore(tmp_path)
    old_etag = await store.create("t/LEASE", b"holder a")
    taken = await store.replace("t/LEASE", b"holder b", if_match=old_etag)
    with pytest.raises(PreconditionFailedError):
        await store.replace_unsynced("t/LEASE", b"holder A", if_match=old_etag)
    assert await store.read("t/LEASE") == (b"holder b", taken)
    with pytest.raises((ObjectNotFoundError, PreconditionFailedError)):
        await store.replace_unsynced("t/GONE", b"x", if_match=old_etag)
    await store.aclose()


async def test_a_writers_renewals_and_idle_marks_keep_the_lease_file(
    tmp_path: Path,
) -> None:
    j = Journal.open(tmp_path)
    path = _lease_path(tmp_path)
    async with j.writer(KEY, "node-a") as w:
        await w.append([ev.SummarySet("one")])
        held = _Held(path)
        size = path.stat().st_size
        for idle in (True, False, True, False):
            assert await w.set_idle(idle)
            await w.renew()
            assert held.still_there()
            assert path.stat().st_size == size
            found = await inspect_lease(j.store, f"{KEY.prefix}/LEASE")
            assert found.damage is None
            assert found.checked
            assert found.record is not None
            assert (found.record.holder, found.record.idle) == ("node-a", idle)
    # The release is an overwrite too, and leaves an expired lease at that epoch.
    assert held.still_there()
    found = await inspect_lease(j.store, f"{KEY.prefix}/LEASE")
    assert found.record is not None
    assert found.record.holder == "node-a"
    # A new holder's acquisition is a new file, synced and renamed into place.
    async with j.writer(KEY, "node-b") as w:
        assert not held.still_there()
        await w.append([ev.SummarySet("two")])
    held.close()
    assert _temporaries(path.parent) == []
    await j.aclose()


async def test_warm_agent_calls_rewrite_the_lease_in_place(tmp_path: Path) -> None:
    async def model(messages: object, tools: object) -> ModelResponse:
        return ModelResponse("hi")

    j = Journal.open(tmp_path)
    agent = Agent("A", "agent", model, journal=j)
    ctx = RuntimeContext(user_id="alice", session_id="s1")
    await agent.call("one", ctx)
    held = _Held(_lease_path(tmp_path, agent.thread_key(ctx)))
    for text in ("two", "three", "four"):
        await agent.call(text, ctx)
        assert held.still_there()
    await agent.close()
    assert held.still_there()  # the release too
    held.close()
    state = await j.load(agent.thread_key(ctx))
    assert [m.text for m in state.context if m.role == "user"] == [
        "one",
        "two",
        "three",
        "four",
    ]
    await j.aclose()


# --- readers that race an overwrite -------------------------------------------------


class _TornOnce:
    """A store whose first read of a key returns a mix of two contents."""

    def __init__(self, inner: MemoryStore, torn: bytes) -> None:
        self.inner = inner
        self.torn: bytes | None = torn
        self.reads = 0

    async def read(self, key: str) -> tuple[bytes, str]:
        self.reads += 1
        if self.torn is not None:
            torn, self.torn = self.torn, None
            return torn, "torn-etag"
        return await self.inner.read(key)


async def test_a_lease_read_half_written_is_read_again() -> None:
    inner = MemoryStore()
    old = encode_lease(LeaseRecord("node-a", 4, 1000.0, 900.0, 30.0))
    new = encode_lease(LeaseRecord("node-a", 4, 1015.0, 900.0, 30.0, idle=True))
    assert len(old) == len(new)
    await inner.create("t/LEASE", new)
    half = len(new) // 2
    store = _TornOnce(inner, new[:half] + old[half:])
    assert decode_lease(store.torn or b"")[1] is not None  # the mix is damaged
    found = await inspect_lease(store, "t/LEASE")  # type: ignore[arg-type]
    assert found.damage is None
    assert found.record == LeaseRecord("node-a", 4, 1015.0, 900.0, 30.0, idle=True)
    assert found.etag == (await inner.read("t/LEASE"))[1]
    assert store.reads == 2


async def test_a_lease_damaged_for_good_is_still_reported() -> None:
    inner = MemoryStore()
    damaged = bytearray(encode_lease(LeaseRecord("node-a", 4, 1000.0, 900.0, 30.0)))
    damaged[30] ^= 0x01
    await inner.create("t/LEASE", bytes(damaged))
    store = _TornOnce(inner, bytes(damaged))
    found = await inspect_lease(store, "t/LEASE")  # type: ignore[arg-type]
    assert found.damage is not None
    assert found.record is not None
    assert found.record.holder == ""
    assert store.reads == 2


async def test_a_lease_file_that_cannot_be_written_is_still_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LEASE this process may not write (copied in read-only) is compared, then
    replaced by a rename, which needs only the directory."""
    store = LocalStore(tmp_path)
    etag = await store.create("t/LEASE", b"lease one")
    path = tmp_path / "t" / "LEASE"
    real_open = os.open
    refused: list[str] = []

    def open_(file: str, flags: int, *args: object, **kwargs: object) -> int:
        # Root ignores file modes (the tests may run as root): refuse as they would.
        if os.fspath(file) == os.fspath(path) and flags & os.O_RDWR:
            refused.append(file)
            raise PermissionError(13, "Permission denied", file)
        return real_open(file, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_)
    held = _Held(path)
    new_etag = await store.replace_unsynced("t/LEASE", b"lease two", if_match=etag)
    assert refused
    assert await store.read("t/LEASE") == (b"lease two", new_etag)
    assert not held.still_there()  # replaced by a new file
    held.close()
    with pytest.raises(PreconditionFailedError):
        await store.replace_unsynced("t/LEASE", b"lease 333", if_match=etag)
    await store.aclose()
