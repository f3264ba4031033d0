"""A thread whose first writer died before its first record is listed either way.

The writer creates the thread's ``LEASE`` (after its index entry), then its first
record. A crash between the two leaves a thread of no records, at head 0, which
listing shows whatever the length of its ids: a path that hashes a long id names
it through the ``IDS`` object the writer stores before the ``LEASE``.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from stores.local import LocalStore
from stores.memory import MemoryStore
from stores.testing.journal_contract.base import RecordingStore

if TYPE_CHECKING:
    from pathlib import Path

    from journal.store import ObjectStore


class Died(Exception):
    """The writer's process ending before its first record."""


async def die_at_records(key: str) -> None:
    if key.endswith(".rec"):
        raise Died(key)


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return MemoryStore(f"unwritten-{uuid.uuid4().hex}")
    return LocalStore(str(tmp_path / "j"))


async def test_a_thread_without_records_is_listed_whatever_its_ids(
    store: ObjectStore,
) -> None:
    """Fails when a hashed path is named only by its records: of two threads left
    in the same state, the one with short ids was listed and the other not."""
    short = ThreadKey("agent", "short-session", "alice")
    long = ThreadKey("agent", "L" * 200, "alice")
    assert any(s.startswith("%%") for s in long.segments)
    dying = Journal(RecordingStore(store, before_create=die_at_records))
    for key in (short, long):
        with pytest.raises(Died):
            async with dying.writer(key, holder="h") as w:
                await w.append([MessageAppended(Msg("user", "x"))])
    j = Journal(store)
    assert {k async for k in j.threads()} == {short, long}
    for key in (short, long):
        assert await j.head(key) == 0
    # A writer that comes later writes the thread as any other.
    async with j.writer(long, holder="h2") as w:
        await w.append([MessageAppended(Msg("user", "y"))])
    assert [m.text for m in (await j.load(long)).context] == ["y"]
    assert {k async for k in j.threads()} == {short, long}


async def test_an_encrypted_long_id_thread_is_listed_without_keys(
    tmp_path: Path,
) -> None:
    """Ids are in the clear (its path names a short-id thread already): fails when
    listing needs the thread's data key to read its first record."""
    from journal.crypto import StaticKeys, generate_key

    root = tmp_path / "j"
    long = ThreadKey("agent", "L" * 200, "alice")
    short = ThreadKey("agent", "s1", "alice")
    writing = Journal.open(root, encryption=StaticKeys([generate_key()]))
    for key in (long, short):
        async with writing.writer(key, holder="h") as w:
            await w.append([MessageAppended(Msg("user", "secret"))])
    keyless = Journal.open(root)
    assert {k async for k in keyless.threads()} == {long, short}
