"""Listing threads: every thread once, filtered by id, the anonymous user apart."""

# ruff: noqa: S101

from __future__ import annotations

import uuid
from typing import Any

from journal import ThreadKey
from stores.testing.journal_contract.base import (
    JournalFactory,
    JournalFixtures,
    say,
    texts,
)

__all__ = ["ThreadsContract"]


class ThreadsContract(JournalFixtures):
    """Listing threads and filtering them by namespace, agent, session and user."""

    async def test_threads_listing_and_filters(self, journal: JournalFactory) -> None:
        """threads() lists every thread once; filters select by id, anonymous apart."""
        ns = f"ns-{uuid.uuid4().hex[:12]}"
        keys = [
            ThreadKey("agent-a", "s1", None, "main", ns),
            ThreadKey("agent-a", "s1", "~", "main", ns),
            ThreadKey("agent-a", "s2", "alice", "main", ns),
            ThreadKey("agent-a", "s2", "alice", "side", ns),
            ThreadKey("agent-b", "s1", "bob", "main", ns),
            ThreadKey("agent-b", "s3", None, "main", ns),
        ]
        j = journal()
        for key in keys:
            async with j.writer(key) as w:
                await w.append([say(str(key))])

        async def listed(**filters: Any) -> set[ThreadKey]:
            return {k async for k in journal().threads(**filters)}

        assert await listed(namespace=ns) == set(keys)
        assert len([k async for k in journal().threads(namespace=ns)]) == len(keys)
        assert await listed(namespace=ns, user_id=None) == {
            k for k in keys if k.user_id is None
        }
        assert await listed(namespace=ns, user_id="~") == {
            k for k in keys if k.user_id == "~"
        }
        assert await listed(namespace=ns, user_id="alice") == set(keys[2:4])
        assert await listed(namespace=ns, agent_id="agent-b") == set(keys[4:])
        assert await listed(namespace=ns, session_id="s1") == {
            keys[0],
            keys[1],
            keys[4],
        }
        assert await listed(namespace=ns, agent_id="agent-a", session_id="s2") == set(
            keys[2:4]
        )
        assert await listed(namespace=ns, agent_id="nobody") == set()
        assert set(keys) <= await listed()
        for key in keys:
            assert texts(await journal().load(key)) == [str(key)]
