"""The thread index: listing reads one prefix when the store's thread index is complete.

Every writer registers a new thread (``~threads/<path>.t``) before its LEASE; a new
store is marked complete by its first writer, an older one by
``Journal.index_threads``. These tests check that listing from the index finds
exactly what the walk finds: no thread missed, none that is not there.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.engine.thread_index import (
    COMPLETE_KEY,
    INDEX_PREFIX,
    ThreadIndex,
    entry_of,
)
from journal.layout import LEASE_NAME
from stores.local import LocalStore
from stores.memory import MemoryStore

if TYPE_CHECKING:
    from pathlib import Path

KEYS = [
    ThreadKey("agent", "s1", user_id="alice"),
    ThreadKey("agent", "s1", user_id="alice", thread_id="side"),
    ThreadKey("agent", "s2", user_id=None),
    ThreadKey("other", "s1", user_id="bob"),
    ThreadKey("agent", "s3", user_id="bob", namespace="tenant-b"),
]


class NoWalkStore(LocalStore):
    """A local store on which any directory walk fails the test."""

    async def children(self, prefix: str) -> list[str]:
        if prefix == "":
            # A writer's check of a new store; never listing.
            return await super().children(prefix)
        raise AssertionError(f"walked children({prefix!r})")

    async def descendants(self, prefix, pattern):  # type: ignore[no-untyped-def]
        raise AssertionError(f"walked descendants({prefix!r}, {pattern!r})")


class CountingStore(LocalStore):
    """A local store that counts the directory walks listing asks of it."""

    def __init__(self, root: object) -> None:
        super().__init__(root)  # type: ignore[arg-type]
        self.walks = 0

    async def descendants(self, prefix, pattern):  # type: ignore[no-untyped-def]
        self.walks += 1
        return await super().descendants(prefix, pattern)


async def write(journal: Journal, keys: list[ThreadKey]) -> None:
    for key in keys:
        async with journal.writer(key) as w:
            await w.append([MessageAppended(Msg("user", repr(key)))])


async def listed(journal: Journal, **filters: object) -> list[ThreadKey]:
    return sorted(
        [k async for k in journal.threads(**filters)],  # type: ignore[arg-type]
        key=repr,
    )


def by_repr(keys: list[ThreadKey]) -> list[ThreadKey]:
    return sorted(keys, key=repr)


async def test_a_new_store_lists_from_its_thread_index(tmp_path: Path) -> None:
    root = tmp_path / "root"
    await write(Journal.open(root), KEYS)
    assert (root / COMPLETE_KEY).is_file()
    names = sorted(os.listdir(root / INDEX_PREFIX))
    assert names == sorted(
        ["COMPLETE", *(entry_of(k.prefix)[0].split("/")[-1] for k in KEYS)]
    )
    journal = Journal(NoWalkStore(root))
    assert await listed(journal) == by_repr(KEYS)
    # Filters, as the walk applies them.
    assert await listed(journal, user_id="alice") == by_repr(KEYS[:2])
    assert await listed(journal, user_id=None) == [KEYS[2]]
    assert await listed(journal, agent_id="other") == [KEYS[3]]
    assert await listed(journal, session_id="s1") == by_repr(
        [KEYS[0], KEYS[1], KEYS[3]]
    )
    assert await listed(journal, namespace="tenant-b") == [KEYS[4]]
    assert await listed(journal, namespace="tenant-b", user_id="alice") == []
    # The walk agrees.
    (root / COMPLETE_KEY).unlink()
    walked = CountingStore(root)
    assert await listed(Journal(walked)) == by_repr(KEYS)
    assert walked.walks > 0


async def test_an_entry_without_its_thread_is_not_listed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    await write(Journal.open(root), KEYS[:2])
    # A writer that crashed between the entry and the LEASE left the entry alone.
    ghost = ThreadKey("agent", "never-created", user_id="alice")
    await ThreadIndex(LocalStore(root)).register(ghost.prefix)
    assert (root / entry_of(ghost.prefix)[0]).is_file()
    # An erased thread keeps its entry.
    journal = Journal.open(root)
    assert await journal.erase(user_id="alice", session_id="s1") != []
    assert (root / entry_of(KEYS[1].prefix)[0]).is_file()
    assert await listed(Journal(NoWalkStore(root))) == []
    # A thread created again after its erasure is listed again.
    await write(Journal.open(root), [KEYS[1]])
    assert await listed(Journal(NoWalkStore(root))) == [KEYS[1]]


async def test_a_thread_that_lost_its_lease_is_still_listed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    await write(Journal.open(root), KEYS[:3])
    os.unlink(root.joinpath(*KEYS[0].segments, LEASE_NAME))
    # Its records are still there, and the walk lists it too.
    assert await listed(Journal(NoWalkStore(root))) == by_repr(KEYS[:3])


async def test_a_store_from_before_the_index_walks_until_indexed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    old = KEYS[:3]
    await write(Journal.open(root), old)
    # As a store written before the index existed: no entries, no marker.
    for name in os.listdir(root / INDEX_PREFIX):
        os.unlink(root / INDEX_PREFIX / name)
    # A new thread registers itself, but the store held threads already: the
    # index is not complete, and listing walks.
    new = KEYS[3]
    await write(Journal.open(root), [new])
    assert (root / entry_of(new.prefix)[0]).is_file()
    assert not (root / COMPLETE_KEY).exists()
    counting = CountingStore(root)
    assert await listed(Journal(counting)) == by_repr([*old, new])
    assert counting.walks > 0
    # Indexing registers the others, and marks it complete.
    assert await Journal.open(root).index_threads() == len(old)
    assert (root / COMPLETE_KEY).is_file()
    assert await listed(Journal(NoWalkStore(root))) == by_repr([*old, new])
    # Indexing again changes nothing.
    assert await Journal.open(root).index_threads() == 0


async def test_a_thread_copied_in_by_hand_is_listed_once_indexed(
    tmp_path: Path,
) -> None:
    source, root = tmp_path / "source", tmp_path / "root"
    await write(Journal.open(source), [KEYS[0]])
    await write(Journal.open(root), [KEYS[2]])
    # A restore from a backup: the thread's directory copied into the store.
    shutil.copytree(source / KEYS[0].prefix, root / KEYS[0].prefix)
    assert await listed(Journal.open(root)) == [KEYS[2]]
    assert await Journal.open(root).index_threads() == 1
    assert await listed(Journal.open(root)) == by_repr([KEYS[0], KEYS[2]])


async def test_long_ids_get_an_entry_that_holds_the_path(tmp_path: Path) -> None:
    root = tmp_path / "root"
    long_key = ThreadKey("a" * 120, "s" * 120, user_id="u" * 120)
    hashed = ThreadKey("agent", "\u00e9" * 100, user_id="alice")  # a hashed segment
    await write(Journal.open(root), [long_key, hashed, KEYS[0]])
    entry, data = entry_of(long_key.prefix)
    assert entry.startswith(f"{INDEX_PREFIX}/~")
    assert (root / entry).read_bytes() == data == long_key.prefix.encode()
    assert await listed(Journal(NoWalkStore(root))) == by_repr(
        [long_key, hashed, KEYS[0]]
    )
    assert await listed(Journal(NoWalkStore(root)), session_id="\u00e9" * 100) == [
        hashed
    ]


async def test_writers_racing_on_a_new_store_are_all_listed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    keys = [
        ThreadKey(f"agent-{i % 3}", f"s{i}", user_id=f"u{i % 4}") for i in range(24)
    ]

    async def one_journal(part: list[ThreadKey]) -> None:
        journal = Journal.open(root)
        try:
            await write(journal, part)
        finally:
            await journal.aclose()

    await asyncio.gather(*(one_journal(keys[i::6]) for i in range(6)))
    assert (root / COMPLETE_KEY).is_file()
    assert await listed(Journal(NoWalkStore(root))) == by_repr(keys)


@pytest.mark.parametrize("fsync", [True, False])
async def test_the_memory_store_and_fsync_off_keep_a_thread_index_too(
    tmp_path: Path, fsync: bool
) -> None:
    memory = Journal(MemoryStore())
    await write(memory, KEYS)
    assert (await memory.store.exist_many([COMPLETE_KEY])) == [True]
    assert await listed(memory) == by_repr(KEYS)
    local = Journal.open(tmp_path / "root", fsync=fsync)
    await write(local, KEYS)
    assert await listed(local) == by_repr(KEYS)


async def test_entries_put_there_by_hand_name_no_thread(tmp_path: Path) -> None:
    root = tmp_path / "root"
    await write(Journal.open(root), KEYS[:2])
    index = root / INDEX_PREFIX
    for name in (
        "a..b.c.d.t",  # an empty segment
        "default.agent.alice.s1.t",  # four segments
        "default.agent.alice.s1.main.x.t",  # six
        "default.agent.al ice.s1.main.t",  # a character no encoding writes
        "README",  # not an entry at all
    ):
        (index / name).write_bytes(b"")
    (index / "~deadbeef.t").write_bytes(b"default/../../etc/passwd/x")
    (index / "~feedface.t").write_bytes(b"\xff\xfe")
    assert await listed(Journal(NoWalkStore(root))) == by_repr(KEYS[:2])
