"""Shared helpers of the runtime tests."""

from __future__ import annotations

import uuid

from journal import Journal, ThreadKey


def fresh_url() -> str:
    """A new process-wide memory journal URL (each test gets its own)."""
    return f"memory://runtime-{uuid.uuid4().hex}"


def key(session: str = "s1", user: str | None = "alice", agent: str = "assistant"):
    return ThreadKey(agent, session, user)


async def all_records(j: Journal, k: ThreadKey, start: int = 1):
    return [r async for r in j.records(k, start)]


async def all_events(j: Journal, k: ThreadKey, start: int = 1):
    return [(r.version, e) for r in await all_records(j, k, start) for e in r.events]


def names(events) -> list[str]:
    return [type(e).__name__ for _, e in events]
