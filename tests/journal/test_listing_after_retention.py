"""A thread whose ids are too long for its path stays listed after retention.

Such a thread's path hashes the long id (see ``journal.keys``); listing names it
from its ``ThreadCreated`` event at version 1, which retention removes. The
``RETENTION`` marker carries the thread's ids (they are in the clear in every
other thread's path), checked against the path before they are believed.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import msgspec
import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.layout import ThreadLayout

if TYPE_CHECKING:
    from pathlib import Path

LONG = "https://chat.example.com/c/" + "/".join(f"part.{i}" for i in range(12))


@pytest.fixture(params=["memory", "local"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://retained-{uuid.uuid4().hex}"
    return str(tmp_path / "j")


async def _retained(j: Journal, key: ThreadKey) -> None:
    async with j.writer(key) as w:
        for i in range(3):
            await w.append([MessageAppended(Msg("user", f"m{i}"))])
        await w.checkpoint()
        await w.append([MessageAppended(Msg("user", "after"))])
    marker = await j.retain(key, window=0.0)
    assert marker is not None
    assert marker.first_retained > 1


async def test_a_long_id_thread_is_listed_after_its_first_record_is_gone(
    root: str,
) -> None:
    """Fails when listing names a hashed path only by record 1: after retention
    the live thread vanished from threads() (and from erase()'s answer)."""
    key = ThreadKey("assistant", LONG, user_id="alice")
    assert any(s.startswith("%%") for s in key.segments)  # the id is hashed
    short = ThreadKey("assistant", "s1", user_id="alice")
    async with Journal.open(root) as j:
        for k in (key, short):
            await _retained(j, k)
        assert {k async for k in j.threads()} == {key, short}
        assert {k async for k in j.threads(user_id="alice")} == {key, short}
        assert len((await j.load(key)).context) == 4
        assert set(await j.erase(user_id="alice")) == {key, short}
        assert [k async for k in j.threads()] == []


async def test_a_marker_naming_another_thread_is_not_believed(root: str) -> None:
    """A ``RETENTION`` marker whose ids do not hash to the path it lies in (copied
    from another thread, or forged) names nothing: the thread is not listed under
    another key."""
    key = ThreadKey("assistant", LONG, user_id="alice")
    other = ThreadKey("assistant", LONG + "/other", user_id="alice")
    async with Journal.open(root) as j:
        await _retained(j, key)
        retention = ThreadLayout.of(key).retention_key
        data, etag = await j.store.read(retention)
        marker = msgspec.json.decode(data)
        marker["key"] = {
            "namespace": other.namespace,
            "agent_id": other.agent_id,
            "user_id": other.user_id,
            "session_id": other.session_id,
            "thread_id": other.thread_id,
        }
        await j.store.replace(retention, msgspec.json.encode(marker), if_match=etag)
        assert other not in {k async for k in j.threads()}


async def test_a_damaged_marker_does_not_hide_the_ids_object(root: str) -> None:
    """Fails when one failed decode skips both: a marker that is not JSON hid the
    thread's ``IDS`` object, and the thread was not listed."""
    key = ThreadKey("assistant", LONG, user_id="alice")
    async with Journal.open(root) as j:
        await _retained(j, key)
        retention = ThreadLayout.of(key).retention_key
        _, etag = await j.store.read(retention)
        await j.store.replace(retention, b"not json", if_match=etag)
        assert [k async for k in j.threads()] == [key]
