"""Listing and erasing filters take only ids a thread key could hold.

A filter naming an id no key can have (empty, too long, with control characters)
is a mistake in the caller's code: ``threads()``, ``erase()`` and ``shred()``
refuse it with the ``InvalidKeyError`` a ``ThreadKey`` would raise, on every
store, instead of answering from whatever the store makes of such a path.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.errors import InvalidKeyError

if TYPE_CHECKING:
    from pathlib import Path

BAD: dict[str, Any] = {
    "an empty session": {"session_id": ""},
    "an empty user": {"user_id": ""},
    "an empty agent": {"agent_id": ""},
    "an empty namespace": {"namespace": ""},
    "a session with a newline": {"session_id": "a\nb"},
    "a session too long": {"session_id": "s" * 300},
}


@pytest.fixture(params=["memory", "local"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://filters-{uuid.uuid4().hex}"
    return str(tmp_path / "j")


@pytest.mark.parametrize("what", sorted(BAD))
async def test_a_filter_no_key_could_hold_is_refused(root: str, what: str) -> None:
    """Fails when filters go to the store unchecked: an empty session id erased
    nothing and answered [] on one store and raised a store error about an
    internal path on another."""
    key = ThreadKey("agent", "s1", "alice")
    async with Journal.open(root) as j:
        async with j.writer(key) as w:
            await w.append([MessageAppended(Msg("user", "hi"))])
        filters = BAD[what]
        with pytest.raises(InvalidKeyError):
            [k async for k in j.threads(**filters)]
        erase_filters = {"user_id": "alice", **filters}
        with pytest.raises(InvalidKeyError):
            await j.erase(**erase_filters)
        assert [k async for k in j.threads()] == [key]  # nothing was touched
        assert len((await j.load(key)).context) == 1
